// A Backend that passes every op to another one: the base of wrappers that observe some ops
// (benchmarks time or record GEMMs) and leave the rest alone.
#pragma once

#include "worker/device/backend.h"

namespace tandem::device {

// Not owning; `inner` must outlive it. Thread-safety: as the inner backend.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend* inner) : inner_(inner) {}

  bool host_memory() const override { return inner_->host_memory(); }
  void* Allocate(size_t b) override { return inner_->Allocate(b); }
  void Deallocate(void* p) override { inner_->Deallocate(p); }
  void CopyToDevice(void* d, const void* s, size_t n) override { inner_->CopyToDevice(d, s, n); }
  void CopyToHost(void* d, const void* s, size_t n) override { inner_->CopyToHost(d, s, n); }
  void Synchronize() override { inner_->Synchronize(); }
  Status status() const override { return inner_->status(); }
  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    inner_->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void GemmMixed(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, const float* b, float beta, float* c) override {
    inner_->GemmMixed(p, ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void LinearForward(Precision p, int64_t batch, int64_t in, int64_t out, const float* x,
                     const float* w, const float* b, bool relu, float* y) override {
    inner_->LinearForward(p, batch, in, out, x, w, b, relu, y);
  }
  void SetRowStableForward(bool on) override { inner_->SetRowStableForward(on); }
  void Scale(int64_t n, float a, float* x) override { inner_->Scale(n, a, x); }
  bool AllFinite(int64_t n, const float* x) override { return inner_->AllFinite(n, x); }
  void AddBias(int64_t r, int64_t c, const float* b, float* y) override {
    inner_->AddBias(r, c, b, y);
  }
  void BiasGrad(int64_t r, int64_t c, const float* dy, float* db) override {
    inner_->BiasGrad(r, c, dy, db);
  }
  void ReluForward(int64_t n, const float* x, float* y) override { inner_->ReluForward(n, x, y); }
  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    inner_->ReluBackward(n, y, dy, dx);
  }
  void Sigmoid(int64_t n, const float* x, float* y) override { inner_->Sigmoid(n, x, y); }
  void SigmoidBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    inner_->SigmoidBackward(n, y, dy, dx);
  }
  float BceWithLogits(int64_t n, const float* z, const float* l, const float* w, float norm,
                      float* dz) override {
    return inner_->BceWithLogits(n, z, l, w, norm, dz);
  }
  void Copy(int64_t n, const float* x, float* y) override { inner_->Copy(n, x, y); }
  void Fill(int64_t n, float v, float* y) override { inner_->Fill(n, v, y); }
  void Axpy(int64_t n, float a, const float* x, float* y) override { inner_->Axpy(n, a, x, y); }
  void CopyStrided(int64_t r, int64_t c, const float* s, int64_t sld, float* d, int64_t dld,
                   bool acc) override {
    inner_->CopyStrided(r, c, s, sld, d, dld, acc);
  }
  void PairwiseDotsForward(int64_t b, int64_t n, int64_t d, const float* x, float* o,
                           int64_t old) override {
    inner_->PairwiseDotsForward(b, n, d, x, o, old);
  }
  void PairwiseDotsBackward(int64_t b, int64_t n, int64_t d, const float* x, const float* dz,
                            int64_t ld, float* dx) override {
    inner_->PairwiseDotsBackward(b, n, d, x, dz, ld, dx);
  }
  void Mul(int64_t n, const float* a, const float* b, float* y, bool acc) override {
    inner_->Mul(n, a, b, y, acc);
  }
  void FmForward(int64_t b, int64_t n, int64_t d, const float* x, float* o, int64_t ld) override {
    inner_->FmForward(b, n, d, x, o, ld);
  }
  void FmBackward(int64_t b, int64_t n, int64_t d, const float* x, const float* dz, int64_t ld,
                  float* dx) override {
    inner_->FmBackward(b, n, d, x, dz, ld, dx);
  }
  void SoftmaxForward(int64_t r, int64_t c, const float* x, float* y) override {
    inner_->SoftmaxForward(r, c, x, y);
  }
  void SoftmaxBackward(int64_t r, int64_t c, const float* y, const float* dy, float* dx) override {
    inner_->SoftmaxBackward(r, c, y, dy, dx);
  }
  void MixtureForward(int64_t b, int64_t e, int64_t h, const float* g, const float* x,
                      float* o) override {
    inner_->MixtureForward(b, e, h, g, x, o);
  }
  void MixtureBackward(int64_t b, int64_t e, int64_t h, const float* g, const float* x,
                       const float* dy, float* dg, float* dx, bool acc) override {
    inner_->MixtureBackward(b, e, h, g, x, dy, dg, dx, acc);
  }
  void EmbeddingBagForward(int64_t b, int64_t d, const float* rows, const int64_t* off,
                           const int64_t* inv, const float* w, bool mean, float* pooled) override {
    inner_->EmbeddingBagForward(b, d, rows, off, inv, w, mean, pooled);
  }
  void EmbeddingBagBackward(int64_t b, int64_t d, int64_t u, const float* dp, const int64_t* off,
                            const int64_t* inv, const float* w, bool mean, float* dr) override {
    inner_->EmbeddingBagBackward(b, d, u, dp, off, inv, w, mean, dr);
  }

 protected:
  Backend* inner() const { return inner_; }

 private:
  Backend* inner_;
};

}  // namespace tandem::device
