// Launch-script shell: expanding words (quotes, variables, arrays, ${...}, $((...)), $(...)).
#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "shell_eval.hpp"

namespace moemem::detail {

void Text::add(char c, std::int64_t line) {
  if (marks.empty() || (marks.back().second != line && marks.size() < kMaxTextMarks)) marks.emplace_back(s.size(), line);
  s += c;
}

void Text::add(const Text& t) {
  for (const auto& [off, line] : t.marks) {
    if (marks.empty() || (marks.back().second != line && marks.size() < kMaxTextMarks)) {
      marks.emplace_back(s.size() + off, line);
    }
  }
  s += t.s;
}

std::int64_t Text::line_at(std::size_t offset) const {
  if (marks.empty()) return 0;
  const auto after = std::upper_bound(marks.begin(), marks.end(), offset,
                                      [](std::size_t o, const std::pair<std::size_t, std::int64_t>& m) { return o < m.first; });
  return after == marks.begin() ? marks.front().second : std::prev(after)->second;
}

Text Text::slice(std::size_t from, std::size_t to) const {
  Text out;
  for (std::size_t i = from; i < to && i < s.size(); ++i) out.add(s[i], line_at(i));
  return out;
}

bool shell_glob(std::string_view p, std::string_view t) {
  std::size_t pi = 0, ti = 0, star_p = std::string_view::npos, star_t = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_t = ti;
    } else if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
    } else if (star_p != std::string_view::npos) {
      pi = star_p + 1;
      ti = ++star_t;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

Token quoted_token(const std::string& text, std::int64_t line) {
  std::string q = "'";
  for (const char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return Token{Tk::word, q + "'", line, {}};
}

namespace {

bool is_ifs(char c) { return c == ' ' || c == '\t' || c == '\n'; }

// The index of the bracket closing the one at `open` in `r`, quotes and nesting respected.
std::size_t find_close(std::string_view r, std::size_t open) {
  const char o = r[open];
  const char c = o == '(' ? ')' : o == '{' ? '}' : o;
  int depth = 0;
  for (std::size_t i = open; i < r.size(); ++i) {
    if (r[i] == '\\') {
      ++i;
    } else if ((r[i] == '\'' || r[i] == '"') && i != open) {
      const char q = r[i];
      for (++i; i < r.size() && r[i] != q; ++i) {
        if (q == '"' && r[i] == '\\') ++i;
      }
    } else if (r[i] == o && o != c) {
      ++depth;
    } else if (r[i] == c && (o == c ? i != open : --depth == 0)) {
      return i;
    }
  }
  return std::string_view::npos;
}

}  // namespace

Shell::Nesting::Nesting(Shell& sh, std::int64_t line) : sh_(sh) {
  if (++sh_.nesting_ > kMaxShellNesting) {
    --sh_.nesting_;
    throw InputError(sh_.where(line), fmt::format("expansions nested deeper than {}", kMaxShellNesting),
                     "a script whose ${...} and $((...)) nest less deeply");
  }
}

std::string Shell::where(std::int64_t line) const { return fmt::format("{}: line {}", source_, line); }

void Shell::check_limits(std::size_t word_bytes, std::size_t pending, std::int64_t line) const {
  if (word_bytes > kMaxShellValueBytes) {
    throw InputError(where(line), fmt::format("a word of {} bytes", word_bytes),
                     fmt::format("words and variables of at most {} bytes (the shell expansion limit)", kMaxShellValueBytes));
  }
  if (pending > kMaxShellExpansionBytes - std::min(sh_.expanded, kMaxShellExpansionBytes)) {
    throw InputError(where(line), fmt::format("more than {} bytes of expansion", kMaxShellExpansionBytes),
                     "a script whose variables expand to less (the shell expansion limit)");
  }
}

void Shell::charge(std::size_t bytes, std::int64_t line, std::size_t words) {
  const std::size_t cost = bytes + words * kShellWordBytes;
  check_limits(bytes, cost, line);
  sh_.expanded += cost;
}

namespace {

// Text bytes and slots of one variable.
std::pair<std::size_t, std::size_t> var_size(const Var& v) {
  std::size_t bytes = 0;
  for (const auto& item : v.items) bytes += item.text.s.size();
  for (const auto& [key, item] : v.assoc) bytes += key.size() + item.text.s.size();
  return {bytes, 1 + v.items.size() + v.assoc.size()};
}

}  // namespace

// The charges go straight to the expansion total (check_limits' pending), not through charge,
// whose byte count is one word's (a whole environment may exceed kMaxShellValueBytes).
void Shell::charge_var(const Var& v, std::int64_t line) {
  const auto [bytes, words] = var_size(v);
  const std::size_t cost = bytes + words * kShellWordBytes;
  check_limits(0, cost, line);
  sh_.expanded += cost;
}

void Shell::charge_copy(std::int64_t line) {
  std::size_t bytes = 0, words = positional.size() + functions_.size();
  for (const auto& [name, v] : vars) {
    const auto [b, w] = var_size(v);
    bytes += name.size() + b;
    words += w;
  }
  for (const auto& p : positional) bytes += p.text.s.size();
  const std::size_t cost = bytes + words * kShellWordBytes;
  check_limits(0, cost, line);
  sh_.expanded += cost;
}

// Expands one raw word into fields.
struct Shell::Expander {
  Shell& sh;
  std::string_view r;
  std::int64_t line;
  std::vector<Field> fields;
  Field cur;
  std::size_t i = 0;
  // An expansion that gave nothing but depends on something unknown ($UNSET): the word it was
  // written as, and the dependency; a word left empty becomes that word, so that a flag's
  // missing value can be named.
  std::string weak_text, weak_depends;
  bool no_split = false;  // one word: an assignment's value, a test's operand, a case word
  std::size_t grown = 0;  // bytes put in so far: the limits hold while the word grows ("$a$a$a...")

  void lit(char c, bool quoted) {
    cur.text.add(c, line);
    if (quoted) cur.keep = true;
  }
  void taint(const std::string& d) {
    if (cur.depends_on.empty()) cur.depends_on = d;
  }
  void finish() {
    if (cur.text.s.empty() && !weak_depends.empty()) {
      for (const char ch : weak_text) cur.text.add(ch, line);
      cur.depends_on = weak_depends;
      cur.unset = true;
    }
    if (!cur.text.s.empty() || cur.keep) fields.push_back(std::move(cur));
    cur = Field{};
    weak_text.clear();
    weak_depends.clear();
  }
  void put(const Value& v, bool quoted, const std::string& shown = "") {
    if (v.text.s.empty() && !v.depends_on.empty()) {
      if (weak_depends.empty()) {
        weak_text = shown.empty() ? "\"\"" : shown;
        weak_depends = v.depends_on;
      }
      if (quoted) cur.keep = true;
      return;
    }
    if (!v.depends_on.empty()) taint(v.depends_on);
    grown += v.text.s.size();
    sh.check_limits(cur.text.s.size() + v.text.s.size(), grown + fields.size() * kShellWordBytes, line);
    if (quoted || no_split) {
      cur.text.add(v.text);
      cur.keep = true;
      return;
    }
    for (std::size_t k = 0; k < v.text.s.size(); ++k) {
      if (is_ifs(v.text.s[k])) {
        if (!cur.text.s.empty() || cur.keep) {
          finish();
          sh.check_limits(0, grown + fields.size() * kShellWordBytes, line);  // each field made counts
        }
        if (!v.depends_on.empty()) taint(v.depends_on);
      } else {
        cur.text.add(v.text.s[k], v.text.line_at(k));
      }
    }
  }
  // "${A[@]}" and "$@": one field per item when quoted.
  void put_all(const std::vector<Value>& items, bool quoted, bool join) {
    if (!quoted && !no_split && !join) {  // each item keeps what it depends on
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k > 0 && (!cur.text.s.empty() || cur.keep)) finish();
        put(items[k], false, "${...}");
      }
      return;
    }
    if (join || !quoted || no_split) {
      // "$*" and "${a[*]}" join with IFS's first character (none when IFS is empty), else a space:
      // honoured inside $(...) only (the `$(IFS=,; echo "${a[*]}")` idiom), where an IFS set for
      // the join cannot leak (no `local` scoping here; a script-wide IFS is read as the default).
      std::string sep = " ";
      if (quoted && join && sh.capture != nullptr) {
        if (const auto ifs = sh.vars.find("IFS"); ifs != sh.vars.end() && !ifs->second.items.empty()) {
          sep = ifs->second.items.front().text.s.substr(0, 1);
        }
      }
      Value all;
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k > 0) {
          for (const char ch : sep) all.text.add(ch, line);
        }
        sh.check_limits(all.text.s.size() + items[k].text.s.size(), 0, line);
        all.text.add(items[k].text);
        if (all.depends_on.empty()) all.depends_on = items[k].depends_on;
      }
      if (!items.empty() || quoted) put(all, quoted, "${...}");
      return;
    }
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (k > 0) finish();
      put(items[k], true);
    }
  }

  std::size_t close_of(std::size_t open) {
    const std::size_t c = find_close(r, open);
    if (c == std::string_view::npos) throw InputError(sh.where(line), std::string(r), "a word with its brackets closed");
    return c;
  }
  void count_lines(std::string_view s) { line += std::count(s.begin(), s.end(), '\n'); }

  void dollar(bool quoted);
  void param(const std::string& inner, bool quoted);
  void run(bool in_double);
};

void Shell::Expander::run(bool in_double) {
  while (i < r.size()) {
    const char c = r[i];
    if (c == '\\' && i + 1 < r.size()) {
      const char n = r[i + 1];
      i += 2;
      if (n == '\n') ++line;
      else if (!in_double || n == '$' || n == '`' || n == '"' || n == '\\') lit(n, true);
      else {
        lit('\\', true);
        lit(n, true);
      }
    } else if (c == '\'' && !in_double) {
      const std::size_t e = std::min(r.find('\'', i + 1), r.size());
      cur.keep = true;
      for (std::size_t k = i + 1; k < e; ++k) {
        lit(r[k], true);
        if (r[k] == '\n') ++line;
      }
      i = e + 1;
    } else if (c == '"' && !in_double) {
      cur.keep = true;
      ++i;
      run(true);
      ++i;
    } else if (c == '"' && in_double) {
      return;
    } else if (c == '$') {
      dollar(in_double);
    } else if (c == '`') {
      const std::size_t e = std::min(r.find('`', i + 1), r.size());
      const std::string inner(r.substr(i + 1, e - i - 1));
      put(sh.command_output(inner, line), in_double);
      count_lines(inner);
      i = e + 1;
    } else {
      lit(c, in_double);
      if (c == '\n') ++line;
      ++i;
    }
  }
}

void Shell::Expander::dollar(bool quoted) {
  const char n = i + 1 < r.size() ? r[i + 1] : '\0';
  if (n == '(' && i + 2 < r.size() && r[i + 2] == '(') {
    const std::size_t e = close_of(i + 1);
    const std::string expr(r.substr(i + 3, e - i - 4));
    std::string depends;
    const auto v = sh.arith(expr, line, depends);
    Value out;
    const std::string text = v ? std::to_string(*v) : "$((" + expr + "))";
    for (const char ch : text) out.text.add(ch, line);
    out.depends_on = depends;
    put(out, quoted);
    count_lines(expr);
    i = e + 1;
  } else if (n == '(') {
    const std::size_t e = close_of(i + 1);
    const std::string inner(r.substr(i + 2, e - i - 2));
    put(sh.command_output(inner, line), quoted);
    count_lines(inner);
    i = e + 1;
  } else if (n == '{') {
    const std::size_t e = close_of(i + 1);
    const std::string inner(r.substr(i + 2, e - i - 2));
    i = e + 1;
    param(inner, quoted);
  } else if (n == '\'' && !quoted) {  // $'...'
    const std::size_t e = std::min(r.find('\'', i + 2), r.size());
    cur.keep = true;
    for (std::size_t k = i + 2; k < e; ++k) {
      if (r[k] == '\\' && k + 1 < e) {
        const char x = r[++k];
        lit(x == 'n' ? '\n' : x == 't' ? '\t' : x, true);
      } else {
        lit(r[k], true);
      }
    }
    i = e + 1;
  } else if (is_name_char(n) && !std::isdigit(static_cast<unsigned char>(n))) {
    std::size_t e = i + 1;
    while (e < r.size() && is_name_char(r[e])) ++e;
    const std::string name(r.substr(i + 1, e - i - 1));
    i = e;
    param(name, quoted);
  } else if (std::isdigit(static_cast<unsigned char>(n)) || n == '@' || n == '*' || n == '#' || n == '?' ||
             n == '$' || n == '!' || n == '-') {
    i += 2;
    param(std::string(1, n), quoted);
  } else {
    lit('$', quoted);
    ++i;
  }
}

void Shell::Expander::param(const std::string& inner, bool quoted) {
  const std::string shown = "${" + inner + "}";
  if (inner == "#") {
    put(Value{[&] { Text t; for (const char ch : std::to_string(sh.positional.size())) t.add(ch, line); return t; }(), ""},
        quoted);
    return;
  }
  if ((inner.size() > 1 && inner[0] == '#') || (!inner.empty() && inner[0] == '!')) {
    const bool length = inner[0] == '#';
    std::string name = inner.substr(1), index;
    if (const auto b = name.find('['); b != std::string::npos && name.back() == ']') {
      index = name.substr(b + 1, name.size() - b - 2);
      name = name.substr(0, b);
    }
    if (length && std::all_of(name.begin(), name.end(), is_name_char)) {
      const auto items = sh.lookup(name, index, line);
      std::size_t n = 0;
      if (items) n = index == "@" || index == "*" ? items->size() : items->empty() ? 0 : items->front().text.s.size();
      Value v;
      for (const char ch : std::to_string(n)) v.text.add(ch, line);
      if (!items) v.depends_on = fmt::format("${}, which the script does not set", name);
      put(v, quoted);
      return;
    }
  }
  // NAME or NAME[index], then an operator and its word.
  std::size_t k = 0;
  while (k < inner.size() && (is_name_char(inner[k]) || (k == 0 && (inner[k] == '@' || inner[k] == '*')))) ++k;
  std::string name = inner.substr(0, k), index;
  if (k < inner.size() && inner[k] == '[') {
    const std::size_t e = inner.find(']', k);
    if (e == std::string::npos) throw InputError(sh.where(line), shown, "a closed array index");
    index = inner.substr(k + 1, e - k - 1);
    k = e + 1;
  }
  std::string op, word;
  for (const char* o : {":-", ":=", ":+", ":?", "-", "=", "+", "?"}) {
    if (inner.compare(k, std::string(o).size(), o) == 0) {
      op = o;
      word = inner.substr(k + op.size());
      break;
    }
  }
  if (name.empty() || (op.empty() && k != inner.size())) {  // ${X%...}, ${X/a/b}, ${X:0:2}, ${!X} ...
    Value v;
    for (const char ch : shown) v.text.add(ch, line);
    v.depends_on = fmt::format("{}, which moemem does not evaluate", shown);
    put(v, quoted);
    return;
  }
  const auto items = sh.lookup(name, index, line);
  const bool all = index == "@" || index == "*" || name == "@" || name == "*";
  const bool unset = !items;
  const bool empty = unset || items->empty() || (items->size() == 1 && items->front().text.s.empty());
  bool use_word = false;
  if (op == ":-" || op == ":=") use_word = empty;
  else if (op == "-" || op == "=") use_word = unset;
  else if (op == ":+") use_word = !empty;
  else if (op == "+") use_word = !unset;
  if (use_word) {
    const Value w = sh.expand_one(Token{Tk::word, word, line, {}});
    if (op == ":=" || op == "=") sh.vars[name] = Var{{w}, {}, false};
    put(w, quoted);
    return;
  }
  if (op == ":+" || op == "+") return;
  if (unset) {
    put(Value{{}, fmt::format("${}, which the script does not set", name)}, quoted, shown);
    return;
  }
  put_all(*items, quoted, index == "*" || name == "*" || !all);
}

void Shell::note(const std::string& text) {
  if (sh_.noted.insert(text).second) sh_.run->notes.push_back(text);
}

bool Shell::is_set(const std::string& text, std::int64_t line) {
  const std::size_t b = text.find('[');
  if (b == std::string::npos || text.back() != ']') return lookup(text, "", line).has_value();
  return lookup(text.substr(0, b), text.substr(b + 1, text.size() - b - 2), line).has_value();
}

std::vector<Field> Shell::expand(const Token& w) {
  const Nesting guard(*this, w.line);
  Expander e{*this, w.text, w.line, {}, {}, 0, {}, {}};
  e.run(false);
  e.finish();
  std::size_t bytes = 0;
  for (auto& f : e.fields) {
    bytes += f.text.s.size();
    if (f.depends_on.empty()) f.depends_on = taint_;
  }
  charge(bytes, w.line, e.fields.size());
  return std::move(e.fields);
}

Value Shell::expand_one(const Token& w) {
  const Nesting guard(*this, w.line);
  Expander e{*this, w.text, w.line, {}, {}, 0, {}, {}};
  e.cur.keep = true;
  e.no_split = true;
  e.run(false);
  charge(e.cur.text.s.size(), w.line);
  std::string depends = e.cur.depends_on;
  if (e.cur.text.s.empty() && depends.empty()) depends = e.weak_depends;
  if (depends.empty()) depends = taint_;
  return Value{std::move(e.cur.text), depends};
}

std::optional<std::vector<Value>> Shell::lookup(const std::string& name, const std::string& index_text,
                                                std::int64_t line) {
  auto num = [&](std::string_view digits) {
    Value v;
    for (const char ch : digits) v.text.add(ch, line);
    return v;
  };
  if (name == "@" || name == "*") {
    // As for an array's slots below: every argument is copied, each charged (empty ones, which an
    // unquoted $@ drops, too: a fuzzed 65,536 empty arguments expanded in nested loops ran for minutes).
    charge(0, line, positional.size());
    return positional;
  }
  if (name == "0") return std::vector<Value>{num(path_)};
  if (name == "?") return std::vector<Value>{num("0")};
  if (name == "IFS" && !vars.contains(name)) return std::vector<Value>{num(" \t\n")};  // bash's default
  // bash's BASH_SOURCE[0]: the file being read (a sourced file while it runs), unless the script
  // assigns the name itself.
  if (name == "BASH_SOURCE" && !vars.contains(name) && (index_text.empty() || index_text == "0") &&
      source_ != "arguments") {
    return std::vector<Value>{num(source_)};
  }
  if (name == "$" || name == "!" || name == "-") return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(name[0]))) {
    const std::size_t n = static_cast<std::size_t>(std::stoul(name.substr(0, 6)));
    if (n == 0 || n > positional.size()) return std::nullopt;
    return std::vector<Value>{positional[n - 1]};
  }
  std::string target = name;
  for (int hop = 0; hop < 8 && refs.contains(target); ++hop) target = refs.at(target);
  const auto it = vars.find(target);
  if (it == vars.end()) return std::nullopt;
  const Var& v = it->second;
  std::string index = index_text;
  if (index.find('$') != std::string::npos) index = expand_one(Token{Tk::word, index, line, {}}).text.s;
  if (index == "@" || index == "*") {
    // Every slot is copied whatever the expansion keeps of it (unquoted empty elements split to
    // nothing): each counts against the expansion limit, so that a sparse array expanded in a loop
    // cannot run for long uncharged (a fuzzed arr[65535]=1 expanded 65,536 times took seconds).
    charge(0, line, v.assoc.empty() ? v.items.size() : v.assoc.size());
    if (v.assoc.empty()) return v.items;
    std::vector<Value> out;
    for (const auto& [key, val] : v.assoc) out.push_back(val);
    return out;
  }
  if (!v.assoc.empty() || (index_text.empty() ? false : !std::all_of(index.begin(), index.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }))) {
    if (index.empty()) return std::nullopt;
    const auto a = v.assoc.find(index);
    if (a == v.assoc.end()) return std::nullopt;
    return std::vector<Value>{a->second};
  }
  const std::size_t n = index.empty() ? 0 : static_cast<std::size_t>(std::stoul(index.substr(0, 9)));
  if (n >= v.items.size()) return std::nullopt;
  return std::vector<Value>{v.items[n]};
}

}  // namespace moemem::detail
