// net/json_writer: escaping, commas, and invalid UTF-8.
#include <gtest/gtest.h>

#include "net/json_writer.hpp"
#include "tests/net/valid_json.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::net::test::valid_json;

TEST(json_writer, escapes_and_places_commas) {
  json_writer w;
  w.begin_object().field("a", "q\"\\\n\x01").field("n", int64_t{3}).key("l").begin_array().value(true).null().end_array();
  w.end_object();
  EXPECT_EQ(w.str(), R"({"a":"q\"\\\n\u0001","n":3,"l":[true,null]})");
}

TEST(json_writer, invalid_utf8_becomes_replacement_character) {
  std::string out;
  append_json_string(out, std::string("ok \xC3\xA9 bad \xFF end \xE2\x82"));
  EXPECT_EQ(out, "\"ok \xC3\xA9 bad \xEF\xBF\xBD end \xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_TRUE(valid_json(out));
}
