#include "loadgen/sse_reader.h"

namespace kiln::loadgen {

void SseReader::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (char c : bytes) {
    if (done_) return;
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF whose CR ended the line already
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      end_line(line_, out);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseReader::end_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {  // a blank line dispatches the event, if it has data
    if (has_data_) {
      if (data_ == "[DONE]") {
        done_ = true;
      } else {
        out.push_back({std::move(event_), std::move(data_)});
      }
    }
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // a comment (keep-alives)
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_ += value;
    has_data_ = true;
  } else if (field == "event") {
    event_ = std::string(value);
  }
  // id and retry do not matter to a client that never reconnects; unknown fields are ignored.
}

}  // namespace kiln::loadgen
