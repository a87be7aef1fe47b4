// The SSE reader yields the same events however the byte stream is cut into chunks.
#include "loadgen/sse_reader.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln::loadgen {
namespace {

// Comments, CRLF and bare-CR line ends, a multi-line data field, an event name, a field with no
// space after the colon, an id field, and events after [DONE] that must be ignored.
const std::string kStream =
    ": keep-alive\n\n"
    "data: {\"a\":1}\n\n"
    "event: delta\r\ndata: {\"b\":2}\r\n\r\n"
    "data:line one\rdata: line two\r\r"
    "id: 7\ndata: {\"c\":\"x: y\"}\n\n"
    "data: [DONE]\n\n"
    "data: {\"after\":true}\n\n";

std::vector<SseEvent> read_in_chunks(const std::string& s, const std::vector<size_t>& cuts) {
  SseReader r;
  std::vector<SseEvent> out;
  size_t pos = 0;
  for (size_t cut : cuts) {
    r.feed(std::string_view(s).substr(pos, cut - pos), out);
    pos = cut;
  }
  r.feed(std::string_view(s).substr(pos), out);
  EXPECT_TRUE(r.done());
  return out;
}

void expect_events(const std::vector<SseEvent>& ev, const std::string& where) {
  ASSERT_EQ(ev.size(), 4u) << where;
  EXPECT_EQ(ev[0].data, "{\"a\":1}") << where;
  EXPECT_EQ(ev[0].event, "") << where;
  EXPECT_EQ(ev[1].event, "delta") << where;
  EXPECT_EQ(ev[1].data, "{\"b\":2}") << where;
  EXPECT_EQ(ev[2].data, "line one\nline two") << where;
  EXPECT_EQ(ev[3].data, "{\"c\":\"x: y\"}") << where;
}

TEST(SseReader, WholeStreamGivesEveryEventAndStopsAtDone) { expect_events(read_in_chunks(kStream, {}), "whole"); }

TEST(SseReader, EverySingleSplitPointGivesTheSameEvents) {
  for (size_t cut = 1; cut < kStream.size(); ++cut) expect_events(read_in_chunks(kStream, {cut}), "cut at " + std::to_string(cut));
}

TEST(SseReader, ByteByByteAndRandomChunkingGiveTheSameEvents) {
  std::vector<size_t> every;
  for (size_t i = 1; i < kStream.size(); ++i) every.push_back(i);
  expect_events(read_in_chunks(kStream, every), "byte by byte");
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> cuts;
    for (size_t pos = 0;;) {
      pos += 1 + rng() % 9;
      if (pos >= kStream.size()) break;
      cuts.push_back(pos);
    }
    expect_events(read_in_chunks(kStream, cuts), "random trial " + std::to_string(trial));
  }
}

TEST(SseReader, CrlfSplitBetweenCrAndLfIsOneLineEnd) {
  SseReader r;
  std::vector<SseEvent> out;
  r.feed("data: x\r", out);
  r.feed("\n\r", out);  // LF completes the CRLF; the CR is the blank line
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "x");
  r.feed("\ndata: y\n", out);  // this LF belongs to the previous CR: no second blank line
  EXPECT_EQ(out.size(), 1u);
  r.feed("\n", out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].data, "y");
  EXPECT_FALSE(r.done());
}

TEST(SseReader, UnfinishedEventIsPendingNotEmitted) {
  SseReader r;
  std::vector<SseEvent> out;
  r.feed("data: {\"partial\"", out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(r.has_partial_event());
  r.feed(": 1}\n", out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(r.has_partial_event());
  r.feed("\n", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "{\"partial\": 1}");
  EXPECT_FALSE(r.has_partial_event());
}

TEST(SseReader, BlankLinesWithoutDataEmitNothing) {
  SseReader r;
  std::vector<SseEvent> out;
  r.feed("\n\n\nevent: ping\n\n:comment\n\n", out);
  EXPECT_TRUE(out.empty());
  r.feed("data:\n\n", out);  // an empty data field is still an event
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "");
}

}  // namespace
}  // namespace kiln::loadgen
