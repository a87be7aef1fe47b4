// An incremental reader of a text/event-stream body: bytes arrive in chunks split anywhere (even
// inside a CRLF); complete events come out as they end. Follows the HTML SSE rules this needs:
// lines end in LF, CRLF or CR; `data:` lines of one event join with LF; `event:` names it; lines
// starting with ':' are comments; a blank line ends an event. `data: [DONE]` (OpenAI's end of
// stream) is not an event: it sets done(), and everything after it is ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::loadgen {

struct SseEvent {
  std::string event;  // the `event:` field; "" when absent (the default "message")
  std::string data;   // the `data:` lines joined with '\n'
};

class SseReader {
 public:
  // Consumes `bytes`; appends every event that ends inside them to `out`.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);

  // True once `data: [DONE]` has ended its event.
  bool done() const { return done_; }
  // True when bytes of an unfinished line or event are pending (a stream cut short).
  bool has_partial_event() const { return !line_.empty() || has_data_ || !event_.empty(); }

 private:
  void end_line(std::string_view line, std::vector<SseEvent>& out);

  std::string line_;       // the current line, without its terminator
  bool after_cr_ = false;  // the last byte was CR: an LF that follows belongs to it
  std::string event_;
  std::string data_;
  bool has_data_ = false;
  bool done_ = false;
};

}  // namespace kiln::loadgen
