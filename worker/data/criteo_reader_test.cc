#include "worker/data/criteo_reader.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <random>

#include "common/testing/test_util.h"
#include "worker/data/record_source.h"
#include "worker/data/synthetic.h"

namespace tandem::data {
namespace {

std::string Line(const std::string& label, const std::string& i1, const std::string& c1) {
  std::string s = label + "\t" + i1;
  for (int i = 1; i < 13; ++i) s += "\t" + std::to_string(i);
  s += "\t" + c1;
  for (int i = 1; i < 26; ++i) s += "\t0000abcd";
  return s;
}

TEST(CriteoParse, GoodLine) {
  Sample s;
  ASSERT_TRUE(ParseCriteoLine(Line("1", "5", "68fd1e64"), {}, &s));
  EXPECT_EQ(s.label(), 1.0f);
  EXPECT_EQ(s.weight, 1.0f);
  EXPECT_FLOAT_EQ(s.dense[0], std::log(6.0f));
  EXPECT_FLOAT_EQ(s.dense[12], std::log(13.0f));
  EXPECT_EQ(s.cat[0], CategoricalId(0, 0x68fd1e64));
  EXPECT_EQ(s.cat[1], CategoricalId(1, 0xabcd));
  EXPECT_NE(CategoricalId(1, 0xabcd), CategoricalId(2, 0xabcd));  // field is part of the id
}

TEST(CriteoParse, EmptyFieldsNegativeIntsAndCr) {
  Sample s;
  ASSERT_TRUE(ParseCriteoLine(Line("0", "-3", "") + "\r", {}, &s));
  EXPECT_EQ(s.label(), 0.0f);
  EXPECT_EQ(s.dense[0], 0.0f);  // log(1 + max(-3, 0))
  EXPECT_EQ(s.cat[0], MissingId(0));
  EXPECT_NE(MissingId(0), MissingId(1));
  ASSERT_TRUE(ParseCriteoLine(Line("0", "", "ABCD"), {}, &s));
  EXPECT_EQ(s.dense[0], 0.0f);
  EXPECT_EQ(s.cat[0], CategoricalId(0, 0xabcd));  // case and leading zeros do not matter
}

TEST(CriteoParse, MalformedLinesGetWeightZero) {
  Sample s;
  const char* why = nullptr;
  const std::string good = Line("1", "5", "68fd1e64");
  for (const std::string& bad :
       {std::string(""), good.substr(0, good.rfind('\t')), good + "\tff", Line("2", "5", "ab"),
        Line("x", "5", "ab"), Line("1", "5x", "ab"), Line("1", "1.5", "ab"), Line("1", "5", "zz"),
        Line("1", "5", "-1"), Line("1", "5", "11112222333344445")}) {
    s.weight = 1;
    EXPECT_FALSE(ParseCriteoLine(bad, {}, &s, &why)) << bad;
    EXPECT_EQ(s.weight, 0.0f);
    EXPECT_NE(why, nullptr);
    EXPECT_EQ(s.cat[3], MissingId(3));
  }
}

// The parser as first written (split on tabs, then from_chars per field): the definition of
// what a line means, which the single-pass parser must match value for value.
bool ReferenceParse(std::string_view line, const Schema& schema, Sample* out, const char** why) {
  auto fail = [&](const char* reason) {
    MakeBadSample(schema, out);
    *why = reason;
    return false;
  };
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  bool done = false;
  auto next = [&](std::string_view* field) {
    if (done) return false;
    const size_t tab = line.find('\t');
    *field = line.substr(0, tab);
    if (tab == std::string_view::npos) {
      done = true;
    } else {
      line.remove_prefix(tab + 1);
    }
    return true;
  };
  std::string_view f;
  if (!next(&f) || (f != "0" && f != "1")) return fail("bad label (want 0 or 1)");
  out->labels[0] = f == "1" ? 1.0f : 0.0f;
  for (int i = 0; i < schema.num_dense; ++i) {
    if (!next(&f)) return fail("too few fields");
    int64_t v = 0;
    if (!f.empty()) {
      auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
      if (ec != std::errc() || end != f.data() + f.size()) return fail("bad integer field");
    }
    out->dense[i] = DenseTransform(v);
  }
  for (int i = 0; i < schema.num_categorical; ++i) {
    if (!next(&f)) return fail("too few fields");
    uint64_t v = 0;
    if (f.empty()) {
      out->cat[i] = MissingId(i);
      continue;
    }
    auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v, 16);
    if (ec != std::errc() || end != f.data() + f.size()) return fail("bad hex categorical field");
    out->cat[i] = CategoricalId(i, v);
  }
  if (!done) return fail("too many fields");
  out->weight = 1;
  return true;
}

TEST(CriteoParse, MatchesTheReferenceOnMutatedLines) {
  // Generated lines, then random edits drawn from the bytes that matter to the grammar, plus
  // long digit runs (overflow edges) and large counts (past the transform table).
  const SyntheticGenerator gen(SyntheticSpec{});
  RawRecord raw;
  std::mt19937_64 rng(3);
  const std::string alphabet = "0123456789abcdefABCDEFgx-+\t\r .";
  const std::vector<std::string> pieces = {"9223372036854775807",
                                           "9223372036854775808",
                                           "-9223372036854775808",
                                           "-9223372036854775809",
                                           "000000000000000000000000012",
                                           "ffffffffffffffff",
                                           "10000000000000000",
                                           "0000000000000000000abc",
                                           "4095",
                                           "4096",
                                           "123456789",
                                           "-0",
                                           "-"};
  int good = 0, bad = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string line;
    gen.GenerateRaw(n, &raw);
    if (n % 4 == 1) raw.dense[n % 13] = static_cast<int64_t>(rng() % 100000);
    AppendCriteoLine(raw, &line);
    line.pop_back();  // the '\n'
    const int edits = n % 3 == 0 ? 0 : static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !line.empty(); ++e) {
      const size_t at = rng() % line.size();
      switch (rng() % 4) {
        case 0:
          line[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          line.erase(at, 1);
          break;
        case 2:
          line.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default: {
          // Replace the field around `at` with a tricky piece.
          const size_t b = line.rfind('\t', at), f = b == std::string::npos ? 0 : b + 1;
          const size_t t = line.find('\t', at), l = t == std::string::npos ? line.size() : t;
          if (f <= l) line.replace(f, l - f, pieces[rng() % pieces.size()]);
        }
      }
    }
    Sample want, got;
    const char *want_why = nullptr, *got_why = nullptr;
    const bool want_ok = ReferenceParse(line, {}, &want, &want_why);
    ASSERT_EQ(ParseCriteoLine(line, {}, &got, &got_why), want_ok) << line;
    ASSERT_EQ(got, want) << line;
    if (!want_ok) {
      ASSERT_STREQ(got_why, want_why) << line;
    }
    (want_ok ? good : bad) += 1;
  }
  EXPECT_GT(good, 8000);  // both paths well exercised
  EXPECT_GT(bad, 3000);
}

TEST(BadLineLog, KeepsFirstFiveWithFileAndLine) {
  BadLineLog log;
  for (int i = 1; i <= 7; ++i) log.Add("f.tsv", i * 10, "too few fields");
  EXPECT_EQ(log.count(), 7);
  ASSERT_EQ(log.reports().size(), 5u);
  EXPECT_EQ(log.reports()[0], "f.tsv:10: malformed line: too few fields");
  EXPECT_EQ(log.reports()[4], "f.tsv:50: malformed line: too few fields");
}

TEST(LineReader, LinesOffsetsAndLastLineWithoutNewline) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("a"), "ab\n\ncde\nf");
  LineReader r;
  ASSERT_TRUE(r.Open(dir.File("a")).ok());
  std::string_view line;
  std::vector<std::string> got;
  std::vector<uint64_t> offsets;
  while (r.Next(&line)) {
    got.emplace_back(line);
    offsets.push_back(r.line_offset());
  }
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(got, (std::vector<std::string>{"ab", "", "cde", "f"}));
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 3, 4, 8}));
  EXPECT_EQ(r.line_number(), 4);
}

TEST(CriteoSource, ReportsBadLinesWithFileAndLineNumber) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 10; ++i)
    text += (i == 6 ? std::string("garbage") : Line("1", "1", "a")) + "\n";
  testing::WriteFile(dir.File("d.tsv"), text);
  auto src = CriteoSource::Open({dir.File("d.tsv")}, {}, /*block_lines=*/4);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->num_records(), 10);
  Sample s;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*src)->Read(i, &s).ok());
    EXPECT_EQ(s.weight, i == 6 ? 0.0f : 1.0f) << i;
  }
  EXPECT_EQ((*src)->bad_log().count(), 1);
  ASSERT_EQ((*src)->bad_log().reports().size(), 1u);
  EXPECT_EQ((*src)->bad_log().reports()[0],
            dir.File("d.tsv") + ":7: malformed line: bad label (want 0 or 1)");
}

TEST(CriteoSource, EmptyFileIsAClearError) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("e.tsv"), "");
  auto src = CriteoSource::Open({dir.File("e.tsv")}, {});
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(src.status().IsInvalidArgument());
  EXPECT_NE(src.status().message().find("no lines"), std::string::npos);
  EXPECT_TRUE(CriteoSource::Open({dir.File("missing.tsv")}, {}).status().IsNotFound());
}

}  // namespace
}  // namespace tandem::data
