// PTX modules: each .entry's parameter list, laid out as the driver lays out kernel parameters.
//
// A kernel parameter is declared as
//   .param [.align N] .type [.ptr [.space] [.align M]] name[[count]...]
// where .type is a scalar (.u8 ... .f64, .b8 ... .b64), optionally a vector (.v2/.v4/.v8 .type),
// or an opaque handle (.texref, .samplerref, .surfref: 8 bytes). Each parameter starts at the next
// multiple of its alignment (.align N when given, else the size of its element); the buffer is
// as long as the last parameter's end. The .align after .ptr is the pointee's, not the
// parameter's. Launch bounds come from .maxntid / .reqntid after the parameter list.
#include <cctype>
#include <map>
#include <string>

#include "cuda/bytes.h"
#include "cuda/fatbin.h"

namespace flyt::cuda {
namespace {

using internal::CheckedAdd;
using internal::CheckedMul;

// CUDA's parameter buffer is at most 32764 bytes; PTX claiming far more is not a real module.
constexpr uint64_t kMaxParamBytes = uint64_t{1} << 20;
constexpr uint64_t kMaxAlign = uint64_t{1} << 16;

enum class TokenKind { kWord, kString, kPunct, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;
  size_t line = 0;
};

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$' || c == '%' ||
         c == '.';
}

// Splits PTX into words (identifiers, directives, numbers), strings and punctuation, dropping
// blanks and comments.
class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  Result<Token> Next() {
    for (;;) {
      while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        if (text_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (text_.substr(pos_, 2) == "//") {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
        continue;
      }
      if (text_.substr(pos_, 2) == "/*") {
        const size_t end = text_.find("*/", pos_ + 2);
        if (end == std::string_view::npos) return Error("a /* comment never ends");
        for (size_t i = pos_; i < end; ++i) line_ += text_[i] == '\n';
        pos_ = end + 2;
        continue;
      }
      break;
    }
    Token t;
    t.line = line_;
    if (pos_ >= text_.size()) return t;
    const size_t start = pos_;
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        if (text_[pos_] == '\n') return Error("a string never ends");
        pos_ += text_[pos_] == '\\' ? 2 : 1;
      }
      if (pos_ >= text_.size()) return Error("a string never ends");
      ++pos_;
      t.kind = TokenKind::kString;
    } else if (IsWordChar(c)) {
      while (pos_ < text_.size() && IsWordChar(text_[pos_])) ++pos_;
      t.kind = TokenKind::kWord;
    } else {
      ++pos_;
      t.kind = TokenKind::kPunct;
    }
    t.text = text_.substr(start, pos_ - start);
    return t;
  }

  Status Error(const std::string& what) const {
    return InvalidArgument("PTX line " + std::to_string(line_ + 1) + ": " + what);
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  size_t line_ = 0;
};

std::optional<uint64_t> ParseNumber(std::string_view s) {
  uint64_t value = 0;
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    int digit = 0;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (base == 16 && std::isxdigit(static_cast<unsigned char>(c))) {
      digit = std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    } else {
      return std::nullopt;
    }
    if (!CheckedMul(value, base, &value) || !CheckedAdd(value, digit, &value)) return std::nullopt;
  }
  return value;
}

// Bytes of a scalar type directive, 0 when `t` is not one.
uint64_t ScalarBytes(std::string_view t) {
  static const std::map<std::string_view, uint64_t> kSizes = {
      {".b8", 1},     {".u8", 1},     {".s8", 1},         {".b16", 2},     {".u16", 2},
      {".s16", 2},    {".f16", 2},    {".bf16", 2},       {".e4m3", 1},    {".e5m2", 1},
      {".b32", 4},    {".u32", 4},    {".s32", 4},        {".f32", 4},     {".f16x2", 4},
      {".bf16x2", 4}, {".b64", 8},    {".u64", 8},        {".s64", 8},     {".f64", 8},
      {".b128", 16},  {".texref", 8}, {".samplerref", 8}, {".surfref", 8}, {".pred", 1}};
  auto it = kSizes.find(t);
  return it == kSizes.end() ? 0 : it->second;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

class Parser {
 public:
  Parser(std::string_view text, uint32_t sm_arch) : lexer_(text), sm_arch_(sm_arch) {}

  Result<std::vector<KernelInfo>> Run() {
    std::vector<KernelInfo> kernels;
    std::map<std::string, size_t, std::less<>> seen;
    int depth = 0;
    FLYT_RETURN_IF_ERROR(Advance());
    while (tok_.kind != TokenKind::kEnd) {
      if (tok_.kind == TokenKind::kPunct && tok_.text == "{") {
        ++depth;
      } else if (tok_.kind == TokenKind::kPunct && tok_.text == "}") {
        if (--depth < 0) return lexer_.Error("'}' without a matching '{'");
      } else if (depth == 0 && IsWord(".target") && sm_arch_ == 0) {
        // ".target sm_90a, ...": the architecture, when the caller did not know it.
        FLYT_RETURN_IF_ERROR(Advance());
        if (tok_.kind == TokenKind::kWord && tok_.text.starts_with("sm_")) {
          std::string_view digits = tok_.text.substr(3);
          while (!digits.empty() && !std::isdigit(static_cast<unsigned char>(digits.back()))) {
            digits.remove_suffix(1);
          }
          if (auto n = ParseNumber(digits); n && *n < 10000) sm_arch_ = static_cast<uint32_t>(*n);
        }
        continue;
      } else if (depth == 0 && tok_.kind == TokenKind::kWord && tok_.text == ".entry") {
        FLYT_ASSIGN_OR_RETURN(KernelInfo k, ParseEntry());
        if (seen.emplace(k.name, kernels.size()).second) kernels.push_back(std::move(k));
        continue;  // ParseEntry stops on the token after the entry's header
      }
      FLYT_RETURN_IF_ERROR(Advance());
    }
    if (depth != 0) return lexer_.Error("the module ends inside a '{' block");
    return kernels;
  }

 private:
  Status Advance() {
    FLYT_ASSIGN_OR_RETURN(tok_, lexer_.Next());
    return Status::Ok();
  }
  bool IsPunct(std::string_view p) const {
    return tok_.kind == TokenKind::kPunct && tok_.text == p;
  }
  bool IsWord(std::string_view w) const { return tok_.kind == TokenKind::kWord && tok_.text == w; }
  std::string Seen() const {
    return tok_.kind == TokenKind::kEnd ? "the end of the module"
                                        : "'" + std::string(tok_.text) + "'";
  }

  Result<uint64_t> Number(std::string_view what) {
    std::optional<uint64_t> n;
    if (tok_.kind == TokenKind::kWord) n = ParseNumber(tok_.text);
    if (!n) return lexer_.Error("expected " + std::string(what) + ", found " + Seen());
    FLYT_RETURN_IF_ERROR(Advance());
    return *n;
  }

  // After ".entry": name, parameter list, performance directives.
  Result<KernelInfo> ParseEntry() {
    FLYT_RETURN_IF_ERROR(Advance());
    if (tok_.kind != TokenKind::kWord || tok_.text.front() == '.') {
      return lexer_.Error("expected a kernel name after .entry, found " + Seen());
    }
    KernelInfo k;
    k.name = std::string(tok_.text);
    k.sm_arch = sm_arch_;
    k.from_ptx = true;
    FLYT_RETURN_IF_ERROR(Advance());
    uint64_t offset = 0;
    if (IsPunct("(")) {
      FLYT_RETURN_IF_ERROR(Advance());
      while (!IsPunct(")")) {
        if (!k.params.empty()) {
          if (!IsPunct(",")) {
            return lexer_.Error("expected ',' or ')' in the parameters of " + k.name + ", found " +
                                Seen());
          }
          FLYT_RETURN_IF_ERROR(Advance());
        }
        FLYT_RETURN_IF_ERROR(ParseParam(k, &offset));
      }
      FLYT_RETURN_IF_ERROR(Advance());
    }
    k.param_bytes = static_cast<uint32_t>(offset);
    // Performance directives, up to the body or the end of a declaration.
    while (!IsPunct("{") && !IsPunct(";") && tok_.kind != TokenKind::kEnd) {
      if (IsWord(".maxntid") || IsWord(".reqntid")) {
        const bool exact = IsWord(".reqntid");
        FLYT_RETURN_IF_ERROR(Advance());
        uint64_t threads = 1;
        for (int dim = 0; dim < 3; ++dim) {
          if (dim > 0) {
            if (!IsPunct(",")) break;
            FLYT_RETURN_IF_ERROR(Advance());
          }
          FLYT_ASSIGN_OR_RETURN(uint64_t n, Number("a thread count"));
          if (!CheckedMul(threads, n, &threads)) threads = UINT64_MAX;
        }
        if (threads == 0 || threads > UINT32_MAX) {
          return lexer_.Error("launch bound of " + k.name + " is out of range");
        }
        if (exact || !k.max_threads_per_block) {
          k.max_threads_per_block = static_cast<uint32_t>(threads);
        }
        continue;
      }
      FLYT_RETURN_IF_ERROR(Advance());
    }
    if (tok_.kind == TokenKind::kEnd) {
      return lexer_.Error("the module ends in the header of entry " + k.name);
    }
    return k;
  }

  Status ParseParam(KernelInfo& k, uint64_t* offset) {
    const std::string ordinal = std::to_string(k.params.size());
    if (!IsWord(".param")) {
      return lexer_.Error("expected .param for parameter " + ordinal + " of " + k.name +
                          ", found " + Seen());
    }
    FLYT_RETURN_IF_ERROR(Advance());
    uint64_t align = 0;
    uint64_t vector = 1;
    uint64_t element = 0;
    bool after_ptr = false;
    while (tok_.kind == TokenKind::kWord && tok_.text.front() == '.') {
      const std::string_view d = tok_.text;
      FLYT_RETURN_IF_ERROR(Advance());
      if (d == ".align") {
        FLYT_ASSIGN_OR_RETURN(uint64_t n, Number("an alignment"));
        if (!IsPowerOfTwo(n) || n > kMaxAlign) {
          return lexer_.Error(".align " + std::to_string(n) + " of parameter " + ordinal + " of " +
                              k.name + " is not a power of two up to 65536");
        }
        if (!after_ptr) align = n;
      } else if (d == ".v2" || d == ".v4" || d == ".v8") {
        vector = d[2] - '0';
      } else if (d == ".ptr") {
        after_ptr = true;
      } else if (uint64_t bytes = ScalarBytes(d); bytes != 0) {
        if (element != 0) {
          return lexer_.Error("parameter " + ordinal + " of " + k.name + " has two types");
        }
        element = bytes;
      } else if (d == ".global" || d == ".shared" || d == ".const" || d == ".local") {
        if (!after_ptr) {
          return lexer_.Error("parameter " + ordinal + " of " + k.name + " names state space " +
                              std::string(d) + " without .ptr");
        }
      } else {
        return lexer_.Error("unknown directive " + std::string(d) + " in parameter " + ordinal +
                            " of " + k.name);
      }
    }
    if (element == 0) {
      return lexer_.Error("parameter " + ordinal + " of " + k.name + " has no type");
    }
    if (tok_.kind != TokenKind::kWord) {
      return lexer_.Error("expected the name of parameter " + ordinal + " of " + k.name +
                          ", found " + Seen());
    }
    FLYT_RETURN_IF_ERROR(Advance());
    uint64_t count = 1;
    while (IsPunct("[")) {
      FLYT_RETURN_IF_ERROR(Advance());
      FLYT_ASSIGN_OR_RETURN(uint64_t n, Number("an array length"));
      if (!IsPunct("]")) return lexer_.Error("expected ']', found " + Seen());
      FLYT_RETURN_IF_ERROR(Advance());
      if (!CheckedMul(count, n, &count)) count = UINT64_MAX;
    }
    uint64_t size = 0;
    if (!CheckedMul(element, vector, &size) || !CheckedMul(size, count, &size) ||
        size > kMaxParamBytes) {
      return lexer_.Error("parameter " + ordinal + " of " + k.name + " is too large");
    }
    if (align == 0) align = element * vector;
    uint64_t start = (*offset + align - 1) / align * align;
    uint64_t end = 0;
    if (!CheckedAdd(start, size, &end) || end > kMaxParamBytes) {
      return lexer_.Error("the parameters of " + k.name + " exceed " +
                          std::to_string(kMaxParamBytes) + " bytes");
    }
    KernelParam p;
    p.ordinal = static_cast<uint32_t>(k.params.size());
    p.offset = static_cast<uint32_t>(start);
    p.size_bytes = static_cast<uint32_t>(size);
    k.params.push_back(p);
    *offset = end;
    return Status::Ok();
  }

  Lexer lexer_;
  uint32_t sm_arch_;
  Token tok_;
};

}  // namespace

Result<std::vector<KernelInfo>> ParsePtx(std::string_view ptx, uint32_t sm_arch) {
  return Parser(ptx, sm_arch).Run();
}

}  // namespace flyt::cuda
