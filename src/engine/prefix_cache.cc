#include "engine/prefix_cache.h"

#include <algorithm>

namespace kiln {

namespace {
constexpr int64_t kB = ModelState::kBlockSize;

uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64 of the running hash and the next value
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}
}  // namespace

uint64_t PrefixCache::root_hash(const PrefixKey& key) {
  uint64_t h = 0x6b696c6e;
  for (char c : key.model) h = mix(h, static_cast<unsigned char>(c));
  h = mix(h, 0xff);  // separates model from adapter ("ab" + "c" != "a" + "bc")
  for (char c : key.adapter) h = mix(h, static_cast<unsigned char>(c));
  return h;
}

uint64_t PrefixCache::child_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = parent;
  for (int32_t t : tokens) h = mix(h, static_cast<uint32_t>(t));
  return h;
}

PrefixCache::Node* PrefixCache::find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) {
  auto it = nodes_.find(hash);
  if (it == nodes_.end() || it->second.parent != parent ||
      !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(), it->second.tokens.end()))
    return nullptr;
  return &it->second;
}

PrefixHit PrefixCache::lookup(const PrefixKey& key, std::span<const int32_t> prompt, int64_t max_tokens) {
  PrefixHit hit;
  if (!config_.enabled) return hit;
  const int64_t n_blocks = std::min<int64_t>(static_cast<int64_t>(prompt.size()), max_tokens) / kB;
  uint64_t parent = root_hash(key);
  std::vector<Node*> chain;
  size_t usable = 0;  // chain[0, usable) ends at the deepest node with a snapshot
  for (int64_t i = 0; i < n_blocks; ++i) {
    auto toks = prompt.subspan(static_cast<size_t>(i * kB), kB);
    const uint64_t h = child_hash(parent, toks);
    Node* n = find(h, parent, toks);
    if (!n) break;
    chain.push_back(n);
    if (n->snapshot >= 0) usable = chain.size();
    parent = h;
  }
  ++clock_;
  for (Node* n : chain) n->last_use = clock_;
  if (usable == 0) return hit;
  for (size_t i = 0; i < usable; ++i) hit.blocks.push_back(chain[i]->block);
  hit.snapshot = chain[usable - 1]->snapshot;
  return hit;
}

Status PrefixCache::insert(const PrefixKey& key, std::span<const int32_t> tokens, std::span<const int32_t> table,
                           int32_t state_slot) {
  if (!config_.enabled || tokens.empty()) return {};
  if (tokens.size() % kB != 0 || static_cast<int64_t>(table.size()) < static_cast<int64_t>(tokens.size()) / kB)
    return invalid_argument("prefix cache: a prefix of " + std::to_string(tokens.size()) +
                            " tokens is not block-aligned or lacks blocks");
  ++clock_;
  uint64_t parent = root_hash(key);
  const int64_t n_blocks = static_cast<int64_t>(tokens.size()) / kB;
  Node* last = nullptr;
  for (int64_t i = 0; i < n_blocks; ++i) {
    auto toks = tokens.subspan(static_cast<size_t>(i * kB), kB);
    const uint64_t h = child_hash(parent, toks);
    Node* n = find(h, parent, toks);
    if (!n) {
      if (nodes_.count(h)) return {};  // a hash collision with another prefix: leave it cached as is
      Node fresh;
      fresh.parent = parent;
      fresh.tokens.assign(toks.begin(), toks.end());
      fresh.block = table[static_cast<size_t>(i)];
      blocks_.retain(fresh.block);
      if (last) ++last->children;
      n = &(nodes_[h] = std::move(fresh));
    }
    n->last_use = clock_;
    last = n;
    parent = h;
  }
  if (last->snapshot < 0) {
    // Without a free slot the prefix is still cached; only a later chunk end can make it resumable.
    auto snap = slots_.snapshot(state_slot);
    if (snap.ok()) {
      last->snapshot = *snap;
      ++snapshots_;
    }
  }
  enforce_budgets();
  return {};
}

void PrefixCache::drop(std::unordered_map<uint64_t, Node>::iterator it) {
  Node& n = it->second;
  blocks_.release(n.block);
  if (n.snapshot >= 0) {
    slots_.release(n.snapshot);
    --snapshots_;
  }
  if (auto p = nodes_.find(n.parent); p != nodes_.end()) --p->second.children;
  nodes_.erase(it);
}

bool PrefixCache::evict_one() {
  auto victim = nodes_.end();
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it)
    if (it->second.children == 0 && (victim == nodes_.end() || it->second.last_use < victim->second.last_use))
      victim = it;
  if (victim == nodes_.end()) return false;
  drop(victim);
  return true;
}

void PrefixCache::enforce_budgets() {
  while ((held_blocks() > config_.max_blocks || held_bytes() > config_.max_bytes) && evict_one()) {
  }
}

void PrefixCache::clear() {
  while (evict_one()) {
  }
}

}  // namespace kiln
