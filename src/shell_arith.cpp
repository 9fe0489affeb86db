// Launch-script shell: $((...)) and ((...)), bash's integer arithmetic on 64 bits.
#include <cctype>
#include <limits>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "shell_eval.hpp"

namespace moemem::detail {

namespace {

// A value, or unknown with the reason.
struct Num {
  std::optional<std::int64_t> v;
  std::string depends;
};

class Arith {
 public:
  Arith(Shell& sh, std::string_view e, std::int64_t line, int depth) : sh_(sh), e_(e), line_(line), depth_(depth) {}

  Num all() {
    Num n = ternary();
    skip();
    if (i_ != e_.size()) fail(fmt::format("'{}'", e_.substr(i_)));
    return n;
  }

 private:
  Shell& sh_;
  std::string_view e_;
  std::size_t i_ = 0;
  std::int64_t line_;
  int depth_;
  int parens_ = 0;
  int unaries_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(sh_.where(line_), fmt::format("$(({})) at {}", e_, what), "an integer expression bash can evaluate");
  }
  void skip() {
    while (i_ < e_.size() && std::isspace(static_cast<unsigned char>(e_[i_]))) ++i_;
  }
  bool eat(std::string_view op) {
    skip();
    if (e_.substr(i_, op.size()) != op) return false;
    // "<" is not "<=" or "<<", "&" not "&&", "*" not "**", "=" never alone (assignment)
    const std::size_t after = i_ + op.size();
    if (op.size() == 1 && after < e_.size()) {
      const char n = e_[after];
      if ((op == "<" || op == ">") && (n == '=' || n == op[0])) return false;
      if ((op == "&" || op == "|" || op == "*") && n == op[0]) return false;
      if ((op == "!") && n == '=') return false;
    }
    i_ = after;
    return true;
  }

  static Num unknown(const Num& a, const Num& b) { return Num{std::nullopt, a.depends.empty() ? b.depends : a.depends}; }

  Num binary(const Num& a, const Num& b, std::string_view op) {
    if (!a.v || !b.v) return unknown(a, b);
    const std::int64_t x = *a.v, y = *b.v;
    std::int64_t r = 0;
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
    else if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
    else if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
    else if (op == "/" || op == "%") {
      if (y == 0) fail("a division by zero");
      if (x == std::numeric_limits<std::int64_t>::min() && y == -1) overflow = true;
      else r = op == "/" ? x / y : x % y;
    } else if (op == "**") {
      if (y < 0) fail("a negative exponent");
      r = 1;
      for (std::int64_t k = 0; k < y && !overflow; ++k) overflow = __builtin_mul_overflow(r, x, &r);
    } else if (op == "<<" || op == ">>") {
      if (y < 0 || y > 62) fail("a shift outside 0..62");
      r = op == "<<" ? (x << y) : (x >> y);
      if (op == "<<" && (r >> y) != x) overflow = true;
    } else if (op == "<") r = x < y;
    else if (op == "<=") r = x <= y;
    else if (op == ">") r = x > y;
    else if (op == ">=") r = x >= y;
    else if (op == "==") r = x == y;
    else if (op == "!=") r = x != y;
    else if (op == "&") r = x & y;
    else if (op == "|") r = x | y;
    else if (op == "^") r = x ^ y;
    else if (op == "&&") r = x != 0 && y != 0;
    else if (op == "||") r = x != 0 || y != 0;
    if (overflow) fail("a result beyond 64 bits");
    return Num{r, ""};
  }

  // Each level: its operators, then the next level.
  Num level(int l) {
    static const std::vector<std::vector<std::string_view>> kLevels = {
        {"||"}, {"&&"}, {"|"}, {"^"}, {"&"}, {"==", "!="}, {"<=", ">=", "<", ">"}, {"<<", ">>"}, {"+", "-"},
        {"*", "/", "%"}};
    if (l == static_cast<int>(kLevels.size())) return power();
    Num a = level(l + 1);
    while (true) {
      bool matched = false;
      for (const auto op : kLevels[static_cast<std::size_t>(l)]) {
        if (eat(op)) {
          a = binary(a, level(l + 1), op);
          matched = true;
          break;
        }
      }
      if (!matched) return a;
    }
  }

  Num ternary() {
    Num c = level(0);
    if (!eat("?")) return c;
    Num a = ternary();
    if (!eat(":")) fail("a '?' without ':'");
    Num b = ternary();
    if (!c.v) return unknown(c, c);
    return *c.v != 0 ? a : b;
  }

  Num power() {
    Num a = unary();
    if (eat("**")) return binary(a, power(), "**");
    return a;
  }

  Num unary() {
    if (++unaries_ > kMaxShellNesting * 8) fail("too many unary operators");
    if (eat("++") || eat("--")) return Num{std::nullopt, "an assignment inside $((...))"};
    if (eat("-")) return binary(Num{0, ""}, unary(), "-");
    if (eat("+")) return unary();
    if (eat("!")) {
      Num a = unary();
      return a.v ? Num{*a.v == 0, ""} : a;
    }
    if (eat("~")) {
      Num a = unary();
      return a.v ? Num{~*a.v, ""} : a;
    }
    return primary();
  }

  Num primary() {
    skip();
    if (eat("(")) {
      if (++parens_ > kMaxShellNesting) fail("parentheses nested too deeply");
      Num a = ternary();
      --parens_;
      if (!eat(")")) fail("a '(' without ')'");
      return a;
    }
    const std::size_t from = i_;
    if (i_ < e_.size() && std::isdigit(static_cast<unsigned char>(e_[i_]))) {
      while (i_ < e_.size() && std::isalnum(static_cast<unsigned char>(e_[i_]))) ++i_;
      const std::string digits(e_.substr(from, i_ - from));
      try {
        std::size_t used = 0;
        const long long v = std::stoll(digits, &used, 0);
        if (used != digits.size()) fail(fmt::format("'{}'", digits));
        return Num{v, ""};
      } catch (const std::logic_error&) {
        fail(fmt::format("'{}'", digits));
      }
    }
    while (i_ < e_.size() && (std::isalnum(static_cast<unsigned char>(e_[i_])) || e_[i_] == '_')) ++i_;
    if (i_ == from) fail(i_ < e_.size() ? fmt::format("'{}'", e_.substr(i_)) : std::string("the end"));
    const std::string name(e_.substr(from, i_ - from));
    skip();
    if (i_ < e_.size() && e_[i_] == '=' && (i_ + 1 >= e_.size() || e_[i_ + 1] != '=')) {
      return Num{std::nullopt, "an assignment inside $((...))"};
    }
    const auto it = sh_.vars.find(name);
    if (it == sh_.vars.end() || it->second.items.empty()) {
      return Num{std::nullopt, fmt::format("${}, which the script does not set", name)};
    }
    const Value& v = it->second.items.front();
    if (!v.depends_on.empty()) return Num{std::nullopt, v.depends_on};
    if (v.text.s.empty()) return Num{0, ""};
    if (depth_ > 8) fail(fmt::format("'{}' (variables naming variables, too deep)", name));
    // bash evaluates a variable's text again at every use; each reading counts against the
    // expansion limit, so names that name others many times over are refused, not run for minutes.
    sh_.charge(v.text.s.size(), line_);
    return Arith(sh_, v.text.s, line_, depth_ + 1).all();
  }
};

}  // namespace

std::optional<std::int64_t> Shell::arith(const std::string& expr, std::int64_t line, std::string& depends) {
  const Value text = expand_one(Token{Tk::word, expr, line, {}});
  if (!text.depends_on.empty()) {
    depends = text.depends_on;
    return std::nullopt;
  }
  const Num n = Arith(*this, text.text.s, line, 0).all();
  depends = n.depends;
  return n.v;
}

}  // namespace moemem::detail
