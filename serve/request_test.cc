#include "serve/request.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "worker/data/criteo_reader.h"
#include "worker/data/text_format.h"

namespace tandem::serve {
namespace {

using Json = nlohmann::json;

constexpr int kMax = 100;

// The sample the TSV reader makes of `line`.
data::Sample FromTsv(const std::string& line, const data::Schema& schema = {}) {
  data::Sample s(schema);
  const char* why = nullptr;
  EXPECT_TRUE(data::ParseCriteoLine(line, schema, &s, &why)) << line << ": " << why;
  return s;
}

// Parses `body`, which must be good, and returns its samples.
std::vector<data::Sample> ParseOk(const std::string& body, const data::Schema& schema = {},
                                  bool columnar = false) {
  RequestError error = RequestError::kMalformedJson;
  StatusOr<ParsedRequest> r = ParsePredictRequest(body, schema, kMax, &error);
  EXPECT_TRUE(r.ok()) << r.status() << "\nbody: " << body.substr(0, 500);
  EXPECT_EQ(error, RequestError::kNone);
  if (!r.ok()) return {};
  EXPECT_EQ(r->columnar, columnar);
  return r->samples;
}

// Parses `body`, which must fail with `want`, and returns the message.
std::string ParseFails(const std::string& body, RequestError want, const data::Schema& schema = {},
                       int max_instances = kMax) {
  RequestError error = RequestError::kNone;
  StatusOr<ParsedRequest> r = ParsePredictRequest(body, schema, max_instances, &error);
  EXPECT_FALSE(r.ok()) << "body: " << body.substr(0, 500);
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_EQ(error, want) << "got " << RequestErrorName(error) << " (" << r.status()
                         << ") for body: " << body.substr(0, 500);
  return r.status().message();
}

void ExpectSameSample(const data::Sample& got, const data::Sample& want) {
  EXPECT_EQ(got.label(), want.label());
  EXPECT_EQ(got.weight, want.weight);
  EXPECT_EQ(got.dense, want.dense);
  EXPECT_EQ(got.cat, want.cat);
  EXPECT_TRUE(got == want);
}

// One instance as a JSON object and as the equivalent TSV line (label 0).
struct Record {
  Json row = Json::object();
  std::string tsv;
};

// Record with the given dense and categorical JSON values; a TSV field is given per value
// (empty for missing) and a JSON value of `absent` leaves the feature out of the row.
Record MakeRecord(const std::vector<std::pair<Json, std::string>>& dense,
                  const std::vector<std::pair<Json, std::string>>& cat) {
  Record r;
  r.tsv = "0";
  for (size_t i = 0; i < dense.size(); ++i) {
    if (!dense[i].first.is_discarded()) r.row["I" + std::to_string(i + 1)] = dense[i].first;
    r.tsv += "\t" + dense[i].second;
  }
  for (size_t i = 0; i < cat.size(); ++i) {
    if (!cat[i].first.is_discarded()) r.row["C" + std::to_string(i + 1)] = cat[i].first;
    r.tsv += "\t" + cat[i].second;
  }
  return r;
}

const Json kAbsent = Json(Json::value_t::discarded);

// Criteo-shaped records covering every accepted value form.
std::vector<Record> DefaultRecords() {
  std::vector<Record> records;
  // Plain values.
  records.push_back(MakeRecord({{1, "1"},
                                {0, "0"},
                                {5, "5"},
                                {4095, "4095"},
                                {4096, "4096"},
                                {123456789, "123456789"},
                                {-3, "-3"},
                                {int64_t{1} << 62, std::to_string(int64_t{1} << 62)},
                                {std::numeric_limits<int64_t>::max(), "9223372036854775807"},
                                {std::numeric_limits<int64_t>::min(), "-9223372036854775808"},
                                {"42", "42"},
                                {"-7", "-7"},
                                {"0012", "0012"}},
                               {{"68fd1e64", "68fd1e64"}, {"80e26c9b", "80e26c9b"},
                                {"fb936136", "fb936136"}, {"7b4723c4", "7b4723c4"},
                                {"25c83c98", "25c83c98"}, {"7e0ccccf", "7e0ccccf"},
                                {"de7995b8", "de7995b8"}, {"1f89b562", "1f89b562"},
                                {"a73ee510", "a73ee510"}, {"a8cd5504", "a8cd5504"},
                                {"b2cb9c98", "b2cb9c98"}, {"37c9c164", "37c9c164"},
                                {"2824a5f6", "2824a5f6"}, {"1adce6ef", "1adce6ef"},
                                {"8ba8b39a", "8ba8b39a"}, {"891b62e7", "891b62e7"},
                                {"e5ba7672", "e5ba7672"}, {"f54016b9", "f54016b9"},
                                {"21ddcdc9", "21ddcdc9"}, {"b1252a9d", "b1252a9d"},
                                {"07b5194c", "07b5194c"}, {"0", "0"},
                                {"3a171ecb", "3a171ecb"}, {"c5c50484", "c5c50484"},
                                {"e8b83407", "e8b83407"}, {"9727dd16", "9727dd16"}}));
  // Missing fields every way (absent, null, ""), big and string-held integers, integer and
  // upper-case categoricals.
  records.push_back(MakeRecord({{kAbsent, ""},
                                {nullptr, ""},
                                {"", ""},
                                {"9223372036854775807", "9223372036854775807"},
                                {"-9223372036854775808", "-9223372036854775808"},
                                {"00000000000000000000000000005", "00000000000000000000000000005"},
                                {"-0", "-0"},
                                {std::numeric_limits<uint64_t>::max() >> 1, "9223372036854775807"},
                                {-1, "-1"},
                                {kAbsent, ""},
                                {nullptr, ""},
                                {2, "2"},
                                {kAbsent, ""}},
                               {{255, "ff"},
                                {0, "0"},
                                {std::numeric_limits<uint64_t>::max(), "ffffffffffffffff"},
                                {"ABCDEF12", "ABCDEF12"},
                                {"aBcDeF", "aBcDeF"},
                                {"FFFFFFFFFFFFFFFF", "FFFFFFFFFFFFFFFF"},
                                {"0000000000000001", "0000000000000001"},
                                {kAbsent, ""},
                                {nullptr, ""},
                                {"", ""},
                                {int64_t{0x68fd1e64}, "68fd1e64"},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {kAbsent, ""},
                                {"1", "1"}}));
  // Nothing at all: every field missing.
  {
    std::vector<std::pair<Json, std::string>> dense(13, {kAbsent, ""});
    std::vector<std::pair<Json, std::string>> cat(26, {kAbsent, ""});
    records.push_back(MakeRecord(dense, cat));
  }
  return records;
}

TEST(ErrorNames, NamesAndHttpStatus) {
  const std::vector<std::pair<RequestError, std::string>> names = {
      {RequestError::kNone, "none"},
      {RequestError::kMalformedJson, "malformed_json"},
      {RequestError::kWrongShape, "wrong_shape"},
      {RequestError::kWrongType, "wrong_type"},
      {RequestError::kBadValue, "bad_value"},
      {RequestError::kUnknownFeature, "unknown_feature"},
      {RequestError::kEmpty, "empty"},
      {RequestError::kTooManyInstances, "too_many_instances"},
  };
  for (const auto& [e, name] : names) {
    EXPECT_EQ(RequestErrorName(e), name);
    EXPECT_EQ(RequestErrorHttpStatus(e), e == RequestError::kTooManyInstances ? 413 : 400) << name;
  }
}

TEST(ParseRequest, RowFormEqualsTsvReader) {
  for (const Record& r : DefaultRecords()) {
    SCOPED_TRACE(r.tsv);
    const Json body = {{"instances", Json::array({r.row})}};
    const std::vector<data::Sample> samples = ParseOk(body.dump());
    ASSERT_EQ(samples.size(), 1u);
    ExpectSameSample(samples[0], FromTsv(r.tsv));
    EXPECT_EQ(samples[0].weight, 1.0f);
    EXPECT_EQ(samples[0].label(), 0.0f);
  }
}

TEST(ParseRequest, ManyInstancesInOrderWithSignatureName) {
  const std::vector<Record> records = DefaultRecords();
  Json body = {{"signature_name", "serving_default"}, {"instances", Json::array()}};
  for (const Record& r : records) body["instances"].push_back(r.row);
  const std::vector<data::Sample> samples = ParseOk(body.dump());
  ASSERT_EQ(samples.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) ExpectSameSample(samples[i], FromTsv(records[i].tsv));
}

TEST(ParseRequest, ColumnFormEqualsRowForm) {
  const std::vector<Record> records = DefaultRecords();
  Json rows = {{"instances", Json::array()}};
  // A column per feature any record has, with null where a record lacks it.
  Json columns = {{"inputs", Json::object()}, {"signature_name", "serving_default"}};
  for (const Record& r : records) {
    rows["instances"].push_back(r.row);
    for (const auto& [name, value] : r.row.items()) {
      columns["inputs"][name] = Json::array();
    }
  }
  for (auto& [name, column] : columns["inputs"].items()) {
    for (const Record& r : records) column.push_back(r.row.contains(name) ? r.row[name] : Json());
  }
  const std::vector<data::Sample> by_row = ParseOk(rows.dump());
  const std::vector<data::Sample> by_column = ParseOk(columns.dump(), {}, /*columnar=*/true);
  ASSERT_EQ(by_row.size(), records.size());
  ASSERT_EQ(by_column.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) ExpectSameSample(by_column[i], by_row[i]);
}

TEST(ParseRequest, SmallSchemaNamesFollowSchema) {
  const data::Schema schema{2, 3};
  const std::vector<data::Sample> samples = ParseOk(
      R"({"instances": [{"I1": 7, "I2": "-2", "C1": "abc", "C2": 16, "C3": null},
                        {"C3": "DEAD"}]})",
      schema);
  ASSERT_EQ(samples.size(), 2u);
  ExpectSameSample(samples[0], FromTsv("0\t7\t-2\tabc\t10\t", schema));
  ExpectSameSample(samples[1], FromTsv("0\t\t\t\t\tDEAD", schema));
  EXPECT_EQ(samples[0].dense.size(), 2u);
  EXPECT_EQ(samples[0].cat.size(), 3u);

  const std::vector<data::Sample> columns =
      ParseOk(R"({"inputs": {"I2": [1, 2], "C3": ["a", "b"]}})", schema, /*columnar=*/true);
  ASSERT_EQ(columns.size(), 2u);
  ExpectSameSample(columns[1], FromTsv("0\t\t2\t\t\tb", schema));

  ParseFails(R"({"instances": [{"I3": 1}]})", RequestError::kUnknownFeature, schema);
  ParseFails(R"({"instances": [{"C4": "a"}]})", RequestError::kUnknownFeature, schema);
  ParseFails(R"({"inputs": {"C4": ["a"]}})", RequestError::kUnknownFeature, schema);
  // Names the default schema has are unknown here.
  ParseFails(R"({"instances": [{"I13": 1}]})", RequestError::kUnknownFeature, schema);
  ParseOk(R"({"instances": [{"I13": 1, "C26": "a"}]})");
}

TEST(ParseRequest, MalformedJson) {
  for (const std::string body :
       {"", "not json", "{", "{\"instances\": [}", "{} x", "{\"instances\": [{\"I1\": 01}]}",
        "{'instances': []}", "{\"instances\": [{\"I1\": 1,}]}", "{\"a\": \"\xff\"}",
        "/* c */ {\"instances\": [{}]}"}) {
    ParseFails(body, RequestError::kMalformedJson);
  }
}

TEST(ParseRequest, DeepNestingIsRefusedWithoutRecursion) {
  const int kLevels = 100000;
  ParseFails(std::string(kLevels, '[') + std::string(kLevels, ']'), RequestError::kMalformedJson);
  ParseFails(std::string(kLevels, '['), RequestError::kMalformedJson);
  std::string objects;
  for (int i = 0; i < kLevels; ++i) objects += "{\"a\":";
  ParseFails(objects + "1" + std::string(kLevels, '}'), RequestError::kMalformedJson);
  // Just past the bound.
  const std::string nine = R"({"instances": [{"I1": [[[[[[1]]]]]]}]})";
  EXPECT_NE(ParseFails(nine, RequestError::kMalformedJson).find("deeper"), std::string::npos);
  // Within it: a misplaced list is a wrong type, not malformed.
  ParseFails(R"({"instances": [{"I1": [[[[[1]]]]]}]})", RequestError::kWrongType);
  // Brackets inside strings, escaped quotes included, do not count.
  ParseFails(R"({"instances": [{"C1": "[[[[[[[[[[[[[[[[{{{{{{{{{{{"}]})", RequestError::kBadValue);
  ParseFails(R"({"instances": [{"C1": "\"[[[[[[[[[[[[[[[[\\"}]})", RequestError::kBadValue);
}

TEST(ParseRequest, WrongShape) {
  for (const std::string body : {
           R"([])",
           R"("instances")",
           R"(17)",
           R"({})",
           R"({"signature_name": "serving_default"})",
           R"({"instances": [{"I1": 1}], "inputs": {"I1": [1]}})",
           R"({"instances": [{"I1": 1}], "extra": 1})",
           R"({"instances": {"I1": 1}})",
           R"({"instances": "I1"})",
           R"({"instances": [1]})",
           R"({"instances": [{"I1": 1}, [1]]})",
           R"({"instances": [{"I1": 1}, null]})",
           R"({"inputs": [{"I1": 1}]})",
           R"({"inputs": {"I1": 1}})",
           R"({"inputs": {"I1": [1, 2], "C1": ["a"]}})",
           R"({"inputs": {"I1": [1], "C1": ["a", "b"]}})",
       }) {
    ParseFails(body, RequestError::kWrongShape);
  }
  EXPECT_EQ(ParseFails(R"({"inputs": {"I1": [1, 2], "C1": ["a"]}})", RequestError::kWrongShape),
            "inputs.I1: 2 values, but inputs.C1 has 1");  // keys come sorted
  EXPECT_EQ(ParseFails(R"({"instances": [{}, 3]})", RequestError::kWrongShape),
            "instances[1]: not an object");
}

TEST(ParseRequest, WrongType) {
  for (const std::string value :
       {"3.5", "3.0", "1e3", "-0.0", "true", "false", "[1]", "{}", "[]", "{\"a\": 1}"}) {
    ParseFails(R"({"instances": [{"I2": )" + value + "}]}", RequestError::kWrongType);
    ParseFails(R"({"instances": [{"C2": )" + value + "}]}", RequestError::kWrongType);
    ParseFails(R"({"inputs": {"I2": [)" + value + "]}}", RequestError::kWrongType);
  }
  EXPECT_EQ(ParseFails(R"({"instances": [{"I1": 1}, {"I1": 3.5}]})", RequestError::kWrongType),
            "instances[1].I1: want an integer or a string holding one, got a float");
  EXPECT_EQ(ParseFails(R"({"inputs": {"C3": ["a", "b", true]}})", RequestError::kWrongType),
            "inputs.C3[2]: want a hex string or a non-negative integer, got a boolean");
}

TEST(ParseRequest, BadValue) {
  for (const std::string value :
       {R"("abc")", R"("1.5")", R"(" 3")", R"("3 ")", R"("+3")", R"("-")", R"("0x10")", R"("1\t2")",
        R"("99999999999999999999")", R"("-9223372036854775809")", "9223372036854775808",
        "18446744073709551615"}) {
    ParseFails(R"({"instances": [{"I1": )" + value + "}]}", RequestError::kBadValue);
  }
  for (const std::string value :
       {R"("xyz")", R"("ab\tcd")", R"("ab cd")", R"(" ab")", R"("abg")", R"("0x1f")", R"("-1")",
        R"("12345678901234567")", R"("00000000000000001")", R"("é")", "-1",
        "-9223372036854775808"}) {
    ParseFails(R"({"instances": [{"C1": )" + value + "}]}", RequestError::kBadValue);
  }
  EXPECT_EQ(
      ParseFails(R"({"instances": [{}, {}, {}, {"C7": "68fd1e6g"}]})", RequestError::kBadValue),
      "instances[3].C7: not a hex string");
  EXPECT_EQ(ParseFails(R"({"inputs": {"I2": [1, 2, 3, 4, 5, "x5"]}})", RequestError::kBadValue),
            "inputs.I2[5]: not a decimal integer");
  EXPECT_EQ(ParseFails(R"({"instances": [{"C1": -5}]})", RequestError::kBadValue),
            "instances[0].C1: negative integer");
}

TEST(ParseRequest, UnknownFeature) {
  for (const std::string& name : std::vector<std::string>{
           "I0", "I14", "C0", "C27", "I01", "C01", "i1", "c1", "I", "C", "I1 ", " I1", "I-1", "I+1",
           "D1", "label", "", "I99999999999999999999", std::string("C1\0", 3)}) {
    Json body = {{"instances", Json::array({Json::object({{name, 1}})})}};
    ParseFails(body.dump(), RequestError::kUnknownFeature);
    body = {{"inputs", Json::object({{name, Json::array({1})}})}};
    ParseFails(body.dump(), RequestError::kUnknownFeature);
  }
  EXPECT_EQ(ParseFails(R"({"instances": [{"I1": 1}, {"I01": 1}]})", RequestError::kUnknownFeature),
            "instances[1].I01: unknown feature");
  // A long name is echoed only in part.
  const std::string message =
      ParseFails(R"({"instances": [{")" + std::string(10000, 'x') + R"(": 1}]})",
                 RequestError::kUnknownFeature);
  EXPECT_LT(message.size(), 200u);
}

TEST(ParseRequest, Empty) {
  ParseFails(R"({"instances": []})", RequestError::kEmpty);
  ParseFails(R"({"inputs": {}})", RequestError::kEmpty);
  ParseFails(R"({"inputs": {"I1": [], "C1": []}})", RequestError::kEmpty);
  // An instance with no features is not empty: it is one record of all-missing fields.
  const std::vector<data::Sample> samples = ParseOk(R"({"instances": [{}]})");
  ASSERT_EQ(samples.size(), 1u);
  ExpectSameSample(samples[0], FromTsv("0" + std::string(13 + 26, '\t')));
}

TEST(ParseRequest, TooManyInstances) {
  const std::string three = R"({"instances": [{}, {}, {}]})";
  const std::string three_columns = R"({"inputs": {"I1": [1, 2, 3]}})";
  ParseFails(three, RequestError::kTooManyInstances, {}, 2);
  ParseFails(three_columns, RequestError::kTooManyInstances, {}, 2);
  // The count is checked before any instance is looked at.
  ParseFails(R"({"instances": [{}, {}, 1]})", RequestError::kTooManyInstances, {}, 2);
  ParseFails(R"({"instances": [{}, {}, {}]})", RequestError::kTooManyInstances, {}, 0);
  RequestError error = RequestError::kMalformedJson;
  auto r = ParsePredictRequest(three, {}, 3, &error);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->samples.size(), 3u);
  EXPECT_EQ(error, RequestError::kNone);
  r = ParsePredictRequest(three_columns, {}, 3, &error);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->samples.size(), 3u);
  EXPECT_EQ(RequestErrorHttpStatus(RequestError::kTooManyInstances), 413);
}

TEST(ParseRequest, ErrorPointerIsOptionalAndResetOnSuccess) {
  auto r = ParsePredictRequest("{", {}, kMax, nullptr);
  EXPECT_FALSE(r.ok());
  RequestError error = RequestError::kBadValue;
  r = ParsePredictRequest(R"({"instances": [{"I1": 1}]})", {}, kMax, &error);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(error, RequestError::kNone);
}

TEST(EncodeResponse, FloatsRoundTripExactly) {
  std::vector<float> probs = {0.0f,
                              1.0f,
                              0.5f,
                              0.1f,
                              1.0f / 3.0f,
                              std::nextafter(1.0f, 0.0f),
                              std::nextafter(0.0f, 1.0f),
                              std::numeric_limits<float>::min(),
                              std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::max(),
                              1e-30f};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < 10000; ++i) probs.push_back(unit(rng));
  for (int i = 0; i < 10000; ++i) {
    // Arbitrary finite bit patterns, not just probabilities.
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    // -0 prints as "-0", which JSON readers take as the integer 0; a probability is never -0.
    if (std::isfinite(f) && std::bit_cast<uint32_t>(f) != 0x80000000u) probs.push_back(f);
  }
  if (probs.size() % 2 != 0) probs.push_back(0.25f);

  for (const int tasks : {1, 2}) {
    for (const bool columnar : {false, true}) {
      const std::string body = EncodePredictResponse(probs, tasks, 42, columnar);
      const Json j = Json::parse(body);
      const char* key = columnar ? "outputs" : "predictions";
      ASSERT_TRUE(j.contains(key)) << body.substr(0, 200);
      EXPECT_FALSE(j.contains(columnar ? "predictions" : "outputs"));
      ASSERT_TRUE(j["model_version"].is_string());
      EXPECT_EQ(j["model_version"], "42");
      const Json& lists = j[key];
      ASSERT_EQ(lists.size(), probs.size() / tasks);
      for (size_t i = 0; i < lists.size(); ++i) {
        ASSERT_EQ(lists[i].size(), static_cast<size_t>(tasks));
        for (int t = 0; t < tasks; ++t) {
          const float want = probs[i * tasks + t];
          const float got = static_cast<float>(lists[i][t].get<double>());
          ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
              << want << " written as " << lists[i][t].dump();
        }
      }
    }
  }
}

TEST(EncodeResponse, Shape) {
  const std::vector<float> probs = {0.5f, 0.25f};
  EXPECT_EQ(EncodePredictResponse(probs, 1, 42, false),
            R"({"predictions": [[0.5],[0.25]], "model_version": "42"})");
  EXPECT_EQ(EncodePredictResponse(probs, 2, 7, true),
            R"({"outputs": [[0.5,0.25]], "model_version": "7"})");
  EXPECT_EQ(EncodePredictResponse({}, 1, 0, false), R"({"predictions": [], "model_version": "0"})");
  const std::vector<float> odd = {std::nanf(""), std::numeric_limits<float>::infinity()};
  const Json j = Json::parse(EncodePredictResponse(odd, 1, -1, false));
  EXPECT_TRUE(j["predictions"][0][0].is_null());
  EXPECT_TRUE(j["predictions"][1][0].is_null());
  EXPECT_EQ(j["model_version"], "-1");
}

TEST(EncodeError, EscapesAndRoundTrips) {
  const std::string message = "instances[0].C1: bad \"value\" \\ with\ttab\nand newline \x01";
  const std::string body = EncodeError(message);
  const Json j = Json::parse(body);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 1u);
  EXPECT_EQ(j["error"], message);
  EXPECT_NE(body.find(R"(\"value\")"), std::string::npos) << body;
  // Invalid UTF-8 (a name cut mid-character) is replaced, not thrown.
  const Json bad = Json::parse(EncodeError("name \xc3"));
  EXPECT_TRUE(bad["error"].is_string());
}

// Issue 18: a model with a features section names its features and takes lists of ids.
data::Schema FeatureSetSchema() {
  data::Schema s(2, 2, 2);
  s.table = {0, 0};
  s.max_len = {1, 3};
  s.mean = {false, true};
  s.weighted = {false, true};
  return s;
}

TEST(RequestTest, FeatureSetModelsTakeNamedFeaturesAndListsOfIds) {
  const data::Schema schema = FeatureSetSchema();
  const std::vector<std::string> names = {"item", "history"};
  RequestError error = RequestError::kMalformedJson;
  auto r = ParsePredictRequest(
      R"({"instances": [{"I1": 3, "I2": 0.5, "item": 12, "history": ["12", 5, "9:2"]},
                        {"item": "abc", "history": []}]})",
      schema, kMax, &error, names);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples.size(), 2u);
  // The same samples the text reader makes of the same values.
  data::TextLayout layout;
  layout.columns = {{data::TextLayout::Kind::kLabel, 0},   {data::TextLayout::Kind::kLabel, 1},
                    {data::TextLayout::Kind::kDense, 0},   {data::TextLayout::Kind::kDense, 1},
                    {data::TextLayout::Kind::kFeature, 0}, {data::TextLayout::Kind::kFeature, 1}};
  data::Sample want(schema);
  ASSERT_TRUE(data::ParseTextLine("0\t0\t3\t0.5\t12\t12,5,9:2", layout, schema, &want));
  EXPECT_EQ(r->samples[0], want);
  EXPECT_EQ(r->samples[0].id_weights, (std::vector<float>{1, 1, 1, 2}));
  ASSERT_TRUE(data::ParseTextLine("0\t0\t\t\tabc\t", layout, schema, &want));
  EXPECT_EQ(r->samples[1], want);
  // Criteo names are not this model's, and bad ids say where they are.
  auto bad = ParsePredictRequest(R"({"instances": [{"C1": "ab"}]})", schema, kMax, &error, names);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(error, RequestError::kUnknownFeature);
  bad =
      ParsePredictRequest(R"({"instances": [{"history": ["a,b"]}]})", schema, kMax, &error, names);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(error, RequestError::kBadValue);
  EXPECT_NE(bad.status().message().find("instances[0].history"), std::string::npos) << bad.status();
  bad = ParsePredictRequest(R"({"instances": [{"history": [1.5]}]})", schema, kMax, &error, names);
  EXPECT_EQ(error, RequestError::kWrongType);
  bad =
      ParsePredictRequest(R"({"instances": [{"history": ["1:x"]}]})", schema, kMax, &error, names);
  EXPECT_EQ(error, RequestError::kBadValue);
  // Two tasks: two probabilities per instance.
  const std::string body = EncodePredictResponse(std::vector<float>{0.25f, 0.5f}, 2, 7, false);
  EXPECT_NE(body.find("[[0.25,0.5]]"), std::string::npos) << body;
}
}  // namespace
}  // namespace tandem::serve
