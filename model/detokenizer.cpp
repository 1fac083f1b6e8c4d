#include "model/detokenizer.hpp"

#include <utility>

#include "model/detail/tokenizer_utf8.hpp"

namespace troupe::model {

detokenizer::detokenizer(tokenizer tok) : detokenizer(std::move(tok), options{}) {}

detokenizer::detokenizer(tokenizer tok, options opt)
    : tok_(std::move(tok)),
      render_special_(opt.render_special),
      strip_space_default_(opt.strip_leading_space.value_or(tok_.add_space_prefix())),
      strip_space_(strip_space_default_) {}

std::string detokenizer::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, render_special_);
  if (piece.empty()) return {};
  if (strip_space_) {
    if (piece[0] == ' ') piece.erase(0, 1);
    strip_space_ = false;
  }
  pending_ += piece;
  return drain(false);
}

std::string detokenizer::flush() {
  std::string out = drain(true);
  reset();
  return out;
}

void detokenizer::reset() {
  pending_.clear();
  strip_space_ = strip_space_default_;
}

std::string detokenizer::drain(bool final) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    const auto r = detail::scan_utf8(p + i, n - i);
    if (r.status == detail::utf8_status::complete) {
      out.append(pending_, i, r.len);
      i += r.len;
    } else if (r.status == detail::utf8_status::incomplete && !final) {
      break;  // the next token may complete it
    } else {
      out += detail::k_replacement_char;  // one U+FFFD per maximal ill-formed subpart
      i += r.len;
    }
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace troupe::model
