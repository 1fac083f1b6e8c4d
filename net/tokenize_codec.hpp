#pragma once
// `POST /tokenize` and `POST /detokenize` in llama-server's shapes, free of sockets so that tests
// drive them directly:
//   /tokenize   {"content":"...","add_special":false,"parse_special":true,"with_pieces":false}
//               -> {"tokens":[ids]}, or with pieces {"tokens":[{"id":..,"piece":".."}]} (a piece
//               that is not valid UTF-8 on its own is an array of its byte values, as llama-server
//               writes it)
//   /detokenize {"tokens":[ids]} -> {"content":"..."}
// A parse failure is an api_error naming the field. Whether ids are in the vocabulary only the
// pipeline knows (net::inference::detokenize).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/api_error.hpp"

namespace troupe::net {

struct tokenize_query {
  std::string content;
  bool add_special = false;   // a leading bos where the model's default wants one
  bool parse_special = true;  // "<|im_start|>" read as that token (llama-server's default)
  bool with_pieces = false;
};

struct parsed_tokenize {
  std::optional<tokenize_query> query;
  api_error error;  // when !query
};
parsed_tokenize parse_tokenize_request(std::string_view body);

struct parsed_detokenize {
  std::optional<std::vector<int32_t>> tokens;
  api_error error;  // when !tokens
};
parsed_detokenize parse_detokenize_request(std::string_view body);

// What the pipeline answers a tokenize_query: the ids, and with_pieces each one's bytes.
struct tokenized {
  std::vector<int32_t> tokens;
  std::vector<std::string> pieces;  // empty unless with_pieces
};
std::string tokenize_json(const tokenized& t);
std::string detokenize_json(std::string_view content);

}  // namespace troupe::net
