#include "worker/model/interaction.h"

namespace tandem::model {

int64_t DotInteraction::output_width() const {
  return dim_ + num_vectors() * (num_vectors() - 1) / 2;
}

void DotInteraction::Forward(Backend* be, int64_t batch, const float* bottom,
                             const float* const* pooled, float* out) {
  const int64_t n = num_vectors();
  const int64_t width = output_width();
  stacked_.Reserve(be, batch * n * dim_);
  float* x = stacked_.data();
  be->CopyStrided(batch, dim_, bottom, dim_, x, n * dim_, false);
  for (int64_t t = 0; t < num_tables_; ++t) {
    be->CopyStrided(batch, dim_, pooled[t], dim_, x + (t + 1) * dim_, n * dim_, false);
  }
  be->CopyStrided(batch, dim_, bottom, dim_, out, width, false);
  be->PairwiseDotsForward(batch, n, dim_, x, out + dim_, width);
}

void DotInteraction::Backward(Backend* be, int64_t batch, const float* d_out, float* d_bottom,
                              float* const* d_pooled) {
  const int64_t n = num_vectors();
  const int64_t width = output_width();
  d_stacked_.Reserve(be, batch * n * dim_);
  float* dx = d_stacked_.data();
  be->PairwiseDotsBackward(batch, n, dim_, stacked_.data(), d_out + dim_, width, dx);
  // The bottom output reaches the top MLP twice: directly and through the dots.
  be->CopyStrided(batch, dim_, d_out, width, d_bottom, dim_, false);
  be->CopyStrided(batch, dim_, dx, n * dim_, d_bottom, dim_, true);
  for (int64_t t = 0; t < num_tables_; ++t) {
    be->CopyStrided(batch, dim_, dx + (t + 1) * dim_, n * dim_, d_pooled[t], dim_, false);
  }
}

void ConcatInteraction::Forward(Backend* be, int64_t batch, const float* bottom,
                                const float* const* pooled, float* out) {
  const int64_t width = output_width();
  be->CopyStrided(batch, bottom_dim_, bottom, bottom_dim_, out, width, false);
  int64_t col = bottom_dim_;
  for (size_t t = 0; t < dims_.size(); ++t) {
    be->CopyStrided(batch, dims_[t], pooled[t], dims_[t], out + col, width, false);
    col += dims_[t];
  }
}

ConcatInteraction::ConcatInteraction(int64_t bottom_dim, std::vector<int64_t> dims)
    : bottom_dim_(bottom_dim), dims_(std::move(dims)), width_(bottom_dim) {
  for (int64_t d : dims_) width_ += d;
}

void ConcatInteraction::Backward(Backend* be, int64_t batch, const float* d_out, float* d_bottom,
                                 float* const* d_pooled) {
  const int64_t width = output_width();
  be->CopyStrided(batch, bottom_dim_, d_out, width, d_bottom, bottom_dim_, false);
  int64_t col = bottom_dim_;
  for (size_t t = 0; t < dims_.size(); ++t) {
    be->CopyStrided(batch, dims_[t], d_out + col, width, d_pooled[t], dims_[t], false);
    col += dims_[t];
  }
}

StatusOr<std::unique_ptr<Interaction>> MakeInteraction(const std::string& kind, int64_t bottom_dim,
                                                       const std::vector<int64_t>& dims) {
  if (kind == "dot") {
    for (int64_t dim : dims) {
      if (bottom_dim != dim) {
        return Status::InvalidArgument("dot interaction: the last bottom_mlp size (" +
                                       std::to_string(bottom_dim) + ") and every table's dim (" +
                                       std::to_string(dim) + ") must be equal");
      }
    }
    return std::unique_ptr<Interaction>(
        new DotInteraction(static_cast<int64_t>(dims.size()), bottom_dim));
  }
  if (kind == "concat")
    return std::unique_ptr<Interaction>(new ConcatInteraction(bottom_dim, dims));
  return Status::InvalidArgument("unknown model.interaction '" + kind + "' (dot | concat)");
}

}  // namespace tandem::model
