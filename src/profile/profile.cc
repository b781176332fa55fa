#include "profile/profile.h"

namespace flyt::profile {

const char* StateName(State state) {
  switch (state) {
    case State::kUnknown:
      return "unknown";
    case State::kIdle:
      return "idle";
    case State::kAllocatedIdle:
      return "allocated-idle";
    case State::kSteady:
      return "steady";
    case State::kCyclic:
      return "cyclic";
    case State::kBursty:
      return "bursty";
    case State::kLost:
      return "lost";
  }
  return "unknown";
}

const std::vector<State>& AllStates() {
  static const std::vector<State> kAll = {State::kUnknown, State::kIdle,   State::kAllocatedIdle,
                                          State::kSteady,  State::kCyclic, State::kBursty,
                                          State::kLost};
  return kAll;
}

std::optional<State> StateFromName(std::string_view name) {
  for (State s : AllStates()) {
    if (name == StateName(s)) return s;
  }
  return std::nullopt;
}

}  // namespace flyt::profile
