// HandleTable: one client's names for one kind of object (streams, events, modules, functions),
// mapping the number the client chose to what the server holds for it.
//
// Clients choose their own handle numbers so that creating a stream or loading a module needs no
// round trip; the server's job is to make sure a client can only ever name its own objects. Each
// client connection has its own tables, so a number means nothing outside its connection; 0 is
// never a valid handle (it is the default stream); a table holds at most `capacity` entries, so a
// hostile client cannot grow the server without bound. Not thread-safe: the client's server
// thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flyt::remote {

enum class HandleInsert { kOk, kZero, kTaken, kFull };

template <typename T>
class HandleTable {
 public:
  explicit HandleTable(size_t capacity) : capacity_(capacity) {}

  HandleInsert Insert(uint64_t id, T value) {
    if (id == 0) return HandleInsert::kZero;
    if (entries_.size() >= capacity_) return HandleInsert::kFull;
    if (!entries_.emplace(id, std::move(value)).second) return HandleInsert::kTaken;
    return HandleInsert::kOk;
  }

  T* Find(uint64_t id) {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
  }
  const T* Find(uint64_t id) const {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
  }

  std::optional<T> Erase(uint64_t id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    T value = std::move(it->second);
    entries_.erase(it);
    return value;
  }

  // Removes every entry for which pred(id, value) holds and returns them.
  template <typename Pred>
  std::vector<std::pair<uint64_t, T>> EraseIf(Pred&& pred) {
    std::vector<std::pair<uint64_t, T>> out;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (pred(it->first, it->second)) {
        out.emplace_back(it->first, std::move(it->second));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

  // Removes and returns everything.
  std::vector<std::pair<uint64_t, T>> TakeAll() {
    return EraseIf([](uint64_t, const T&) { return true; });
  }

  size_t size() const { return entries_.size(); }

  // Calls f(id, value) for every entry, in no particular order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [id, value] : entries_) f(id, value);
  }

 private:
  size_t capacity_;
  std::unordered_map<uint64_t, T> entries_;
};

}  // namespace flyt::remote
