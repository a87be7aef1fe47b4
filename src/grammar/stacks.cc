// Stepping stacks: a byte moves each top state; the closure then enters every rule a new state
// calls and returns from every rule that may end there, until each stack's top reads bytes.
#include "grammar/stacks.h"

#include <algorithm>

namespace kiln::grammar {

namespace {

size_t hash_key(uint64_t key) {
  key ^= key >> 31;
  key *= 0x7fb5d329728ea185ULL;
  key ^= key >> 27;
  key *= 0x81dadef4bc2dd44dULL;
  key ^= key >> 33;
  return static_cast<size_t>(key);
}

// Above this many, the closure's visited set moves from a vector to a hash set.
constexpr size_t kLinearSeen = 32;

}  // namespace

size_t FrameArena::slot_of(uint64_t key) const {
  const size_t mask = table_.size() - 1;
  size_t i = hash_key(key) & mask;
  while (table_[i] >= 0 && nodes_[table_[i]] != key) i = (i + 1) & mask;
  return i;
}

void FrameArena::grow() {
  std::vector<int32_t> old = std::move(table_);
  table_.assign(old.empty() ? 1024 : old.size() * 2, -1);
  for (int32_t id : old) {
    if (id >= 0) table_[slot_of(nodes_[id])] = id;
  }
}

int32_t FrameArena::make(int32_t below, int32_t state) {
  if ((nodes_.size() + 1) * 2 > table_.size()) grow();
  const uint64_t key = make_stack(below, state);
  const size_t i = slot_of(key);
  if (table_[i] >= 0) return table_[i];
  table_[i] = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(key);
  return table_[i];
}

void FrameArena::truncate(size_t size) {
  const size_t mask = table_.size() - 1;
  while (nodes_.size() > size) {
    // Backward-shift deletion keeps every remaining key reachable from its home slot.
    size_t i = slot_of(nodes_.back());
    table_[i] = -1;
    for (size_t j = (i + 1) & mask; table_[j] >= 0; j = (j + 1) & mask) {
      const size_t home = hash_key(nodes_[table_[j]]) & mask;
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (stays) continue;
      table_[i] = table_[j];
      table_[j] = -1;
      i = j;
    }
    nodes_.pop_back();
  }
}

void FrameArena::clear() {
  nodes_.clear();
  std::fill(table_.begin(), table_.end(), -1);
}

void Stepper::add(Stack s) {
  if (seen_.size() < kLinearSeen) {
    if (std::find(seen_.begin(), seen_.end(), s) != seen_.end()) return;
    seen_.push_back(s);
  } else {
    if (seen_many_.empty()) seen_many_.insert(seen_.begin(), seen_.end());
    if (!seen_many_.insert(s).second) return;
    seen_.push_back(s);
  }
  work_.push_back(s);
}

void Stepper::close(StackSet& out) {
  while (!work_.empty()) {
    const Stack s = work_.back();
    work_.pop_back();
    const int32_t below = stack_below(s), state = stack_state(s);
    if (a_.reads_bytes(state)) out.stacks.push_back(s);
    for (const Call& c : a_.calls(state)) add(make_stack(c.tail ? below : arena_.make(below, c.ret), c.start));
    if (!a_.accepting(state)) continue;
    if (below == FrameArena::kBottom) {
      out.ended = true;
    } else if (below == FrameArena::kContext) {
      out.left = true;
    } else {
      add(make_stack(arena_.below(below), arena_.state(below)));
    }
  }
  seen_.clear();
  seen_many_.clear();
  if (out.stacks.size() > 1) {
    std::sort(out.stacks.begin(), out.stacks.end());
    out.stacks.erase(std::unique(out.stacks.begin(), out.stacks.end()), out.stacks.end());
  }
}

void Stepper::enter(int32_t below, int32_t state, StackSet& out) {
  out.clear();
  add(make_stack(below, state));
  close(out);
}

void Stepper::step(const StackSet& in, uint8_t b, StackSet& out) {
  out.clear();
  if (in.stacks.size() == 1) {
    const Stack s = in.stacks[0];
    const int32_t next = a_.next(stack_state(s), b);
    if (next < 0) return;
    if (a_.plain(next)) {  // the common case inside a token: no call, no return
      out.stacks.push_back(make_stack(stack_below(s), next));
      return;
    }
    add(make_stack(stack_below(s), next));
    close(out);
    return;
  }
  for (Stack s : in.stacks) {
    const int32_t next = a_.next(stack_state(s), b);
    if (next >= 0) add(make_stack(stack_below(s), next));
  }
  close(out);
}

}  // namespace kiln::grammar
