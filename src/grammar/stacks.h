// Run-time configurations of a compiled grammar: a stack is the state of its top frame over a
// hash-consed chain of return frames, and a set of stacks steps byte by byte (calls entered,
// ended rules returned from) so that every stack kept can read a byte next.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "grammar/automaton.h"

namespace kiln::grammar {

// Return frames: node = (the node below it, the state to continue from once the rule above has
// ended). Equal chains are one node, so stacks compare by their two numbers.
class FrameArena {
 public:
  static constexpr int32_t kBottom = -1;   // below the root rule: the text may end here
  static constexpr int32_t kContext = -2;  // below a rule whose caller is unknown

  int32_t make(int32_t below, int32_t state);
  int32_t below(int32_t node) const { return static_cast<int32_t>(nodes_[node] >> 32); }
  int32_t state(int32_t node) const { return static_cast<int32_t>(nodes_[node] & 0xFFFFFFFFu); }
  size_t size() const { return nodes_.size(); }
  // Forgets every node made since size() was `size` (a speculative walk's).
  void truncate(size_t size);
  void clear();

 private:
  size_t slot_of(uint64_t key) const;
  void grow();

  std::vector<uint64_t> nodes_;
  std::vector<int32_t> table_;  // open addressing over node ids; -1 empty
};

using Stack = uint64_t;  // (node below, top state)
inline Stack make_stack(int32_t below, int32_t state) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(below)) << 32) | static_cast<uint32_t>(state);
}
inline int32_t stack_below(Stack s) { return static_cast<int32_t>(s >> 32); }
inline int32_t stack_state(Stack s) { return static_cast<int32_t>(s & 0xFFFFFFFFu); }

struct StackSet {
  std::vector<Stack> stacks;  // sorted, distinct; every top state reads bytes
  bool ended = false;         // the root rule ended on the last byte: the text may stop here
  bool left = false;          // a rule over kContext ended on the last byte

  bool dead() const { return stacks.empty() && !ended && !left; }
  void clear() {
    stacks.clear();
    ended = left = false;
  }
};

class Stepper {
 public:
  Stepper(const Automaton& automaton, FrameArena& arena) : a_(automaton), arena_(arena) {}

  // The stacks once state `state` is entered over node `below`.
  void enter(int32_t below, int32_t state, StackSet& out);
  // The stacks after byte `b`.
  void step(const StackSet& in, uint8_t b, StackSet& out);

 private:
  void add(Stack s);
  void close(StackSet& out);

  const Automaton& a_;
  FrameArena& arena_;
  std::vector<Stack> work_, seen_;
  std::unordered_set<Stack> seen_many_;
};

}  // namespace kiln::grammar
