// Launch-script shell: builtins (export, source, tests, exit ...) and the few programs whose
// output $(...) can know (echo, dirname, basename, readlink -f, realpath).
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "megatron_internal.hpp"
#include "shell_eval.hpp"

namespace moemem::detail {

namespace {

Status known(bool ok) { return Status{ok ? Status::Kind::ok : Status::Kind::failed, ""}; }
Status unknown(const std::string& why) { return Status{Status::Kind::unknown, why}; }

Status negate(Status s) {
  if (s.kind != Status::Kind::unknown) s.kind = s.kind == Status::Kind::ok ? Status::Kind::failed : Status::Kind::ok;
  return s;
}

// `[[ ... ]]`, `[ ... ]` and `test ...` over their words.
class Test {
 public:
  Test(Shell& sh, const std::vector<Field>& a, bool dbl) : sh_(sh), a_(a), dbl_(dbl) {}
  Status all() {
    if (a_.empty()) return known(false);
    Status s = any();
    if (i_ != a_.size()) return unknown(fmt::format("the test's word '{}'", a_[i_].text.s));
    return s;
  }

 private:
  Shell& sh_;
  const std::vector<Field>& a_;
  bool dbl_;
  std::size_t i_ = 0;
  int depth_ = 0;

  bool at(std::string_view w) const { return i_ < a_.size() && a_[i_].text.s == w; }

  Status any() {
    Status s = every();
    while (at("||") || (!dbl_ && at("-o"))) {
      ++i_;
      const Status r = every();
      if (s.kind == Status::Kind::ok || r.kind == Status::Kind::ok) s = known(true);
      else if (s.kind == Status::Kind::unknown || r.kind == Status::Kind::unknown) s = s.kind == Status::Kind::unknown ? s : r;
    }
    return s;
  }
  Status every() {
    Status s = one();
    while (at("&&") || (!dbl_ && at("-a"))) {
      ++i_;
      const Status r = one();
      if (s.kind == Status::Kind::failed || r.kind == Status::Kind::failed) s = known(false);
      else if (s.kind == Status::Kind::unknown || r.kind == Status::Kind::unknown) s = s.kind == Status::Kind::unknown ? s : r;
    }
    return s;
  }
  Status one() {
    if (++depth_ > kMaxShellNesting) return unknown("a test nested too deeply");
    if (at("!")) {
      ++i_;
      return negate(one());
    }
    if (at("(")) {
      ++i_;
      Status s = any();
      if (at(")")) ++i_;
      return s;
    }
    if (i_ >= a_.size()) return unknown("an incomplete test");
    const Field& x = a_[i_];
    static const std::vector<std::string_view> kBinary = {"=", "==", "!=", "=~", "<", ">", "-eq", "-ne", "-lt",
                                                          "-le", "-gt", "-ge"};
    if (i_ + 2 < a_.size() + 0 && i_ + 1 < a_.size() &&
        std::find(kBinary.begin(), kBinary.end(), a_[i_ + 1].text.s) != kBinary.end() && i_ + 2 < a_.size()) {
      const std::string op = a_[i_ + 1].text.s;
      const Field& y = a_[i_ + 2];
      i_ += 3;
      return binary(x, op, y);
    }
    if (x.text.s.size() == 2 && x.text.s[0] == '-' && i_ + 1 < a_.size() && !x.keep) {
      const Field& y = a_[i_ + 1];
      i_ += 2;
      return unary(x.text.s[1], y);
    }
    ++i_;
    if (!x.depends_on.empty() && !x.unset) return unknown(x.depends_on);
    return known(!value(x).empty());
  }
  // A variable the script never sets is taken as unset, as in a clean environment, and noted.
  std::string value(const Field& x) {
    if (!x.unset) return x.text.s;
    sh_.note(fmt::format("{} (line {}) is not set by the script: taken as unset", x.text.s, x.text.line_at(0)));
    return "";
  }
  Status unary(char op, const Field& y) {
    if (op == 'v') return known(sh_.is_set(y.text.s, y.text.line_at(0)));
    if (y.unset && (op == 'n' || op == 'z')) return known((op == 'z') == value(y).empty());
    if (!y.depends_on.empty()) return unknown(y.depends_on);
    if (op == 'n') return known(!y.text.s.empty());
    if (op == 'z') return known(y.text.s.empty());
    std::error_code ec;
    std::filesystem::path p(y.text.s);
    if (p.is_relative() && !std::filesystem::exists(p, ec)) p = std::filesystem::path(sh_.source()).parent_path() / p;
    if ((op == 'f' || op == 'e' || op == 'r' || op == 's') && std::filesystem::is_regular_file(p, ec)) return known(true);
    if ((op == 'd' || op == 'e') && std::filesystem::is_directory(p, ec)) return known(true);
    return unknown(fmt::format("-{} {}: the file system where the script runs", op, y.text.s));
  }
  Status binary(const Field& x, const std::string& op, const Field& y) {
    if (!x.depends_on.empty() && !x.unset) return unknown(x.depends_on);
    if (!y.depends_on.empty() && !y.unset) return unknown(y.depends_on);
    const std::string l = value(x);
    const std::string r = value(y);
    if (op == "=" || op == "==") return known(dbl_ && !y.keep ? shell_glob(r, l) : l == r);
    if (op == "!=") return known(!(dbl_ && !y.keep ? shell_glob(r, l) : l == r));
    if (op == "<") return known(l < r);
    if (op == ">") return known(l > r);
    if (op == "=~") {
      if (y.keep) return known(l.find(r) != std::string::npos);
      try {
        return known(std::regex_search(l, std::regex(r, std::regex::extended)));
      } catch (const std::regex_error&) {
        return unknown(fmt::format("the pattern {}", r));
      }
    }
    std::string d1, d2;
    const auto a = sh_.arith(l.empty() ? "0" : l, x.text.line_at(0), d1);
    const auto b = sh_.arith(r.empty() ? "0" : r, y.text.line_at(0), d2);
    if (!a || !b) return unknown(d1.empty() ? d2 : d1);
    if (op == "-eq") return known(*a == *b);
    if (op == "-ne") return known(*a != *b);
    if (op == "-lt") return known(*a < *b);
    if (op == "-le") return known(*a <= *b);
    if (op == "-gt") return known(*a > *b);
    return known(*a >= *b);
  }
};

}  // namespace

Status Shell::test(const std::vector<Field>& args, bool double_bracket) {
  return Test(*this, args, double_bracket).all();
}

// `$(yq QUERY FILE)` on a ModelZoo recipe, as sbatch_benchmarking.sh queries it: MODEL_ARGS as
// "--flag value" text, or one flag's value; ${VAR}s substituted as envsubst does with the
// script's variables (those it does not set stay as written).
std::optional<Status> Shell::run_yq(const std::vector<Field>& args) {
  namespace fs = std::filesystem;
  std::string query, file;
  for (std::size_t k = 1; k < args.size(); ++k) {
    const std::string& a = args[k].text.s;
    if (a.find("MODEL_ARGS") != std::string::npos || a.find("ENV_VARS") != std::string::npos) query = a;
    else if (a.empty() || a[0] != '-') file = a;
  }
  fs::path p(file);
  std::error_code ec;
  if (file.size() > 4 && file.ends_with(".tmp") && !fs::is_regular_file(p, ec)) p = file.substr(0, file.size() - 4);
  if (p.is_relative() && !fs::is_regular_file(p, ec)) p = fs::path(source_).parent_path() / p;
  if (query.find("MODEL_ARGS") == std::string::npos || !fs::is_regular_file(p, ec) ||
      fs::file_size(p, ec) > kMaxShellValueBytes) {
    return std::nullopt;
  }
  std::ifstream in(p, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const auto recipe = modelzoo_recipe(text.str(), p.string());
  if (!recipe) return std::nullopt;
  const auto subst = [&](const std::string& v) {
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::size_t close = v.find('}', i);
      if (v.compare(i, 2, "${") != 0 || close == std::string::npos) {
        out += v[i];
        continue;
      }
      const std::string name = v.substr(i + 2, close - i - 2);
      const auto it = vars.find(name);
      out += it != vars.end() && !it->second.items.empty() ? it->second.items.front().text.s : v.substr(i, close - i + 1);
      i = close;
    }
    return out;
  };
  std::string out;
  const std::size_t key = query.find(".MODEL_ARGS.\"");
  for (const RecipeArg& a : *recipe) {
    if (key != std::string::npos) {
      if (query.compare(key + 13, a.flag.size() + 1, a.flag + "\"") == 0) out = subst(a.value);
      continue;
    }
    const std::string v = subst(a.value);
    if (v == "false") continue;  // after envsubst, as the ModelZoo's yq query sees it
    out += a.flag + (v.empty() || v == "true" ? "" : " " + v) + "\n";
  }
  charge(out.size(), args.front().text.line_at(0));
  *capture += out;
  return Status{};
}

Status Shell::run_declare(const Command& c, std::size_t at) {
  bool assoc = false, nameref = false;
  for (std::size_t k = at + 1; k < c.words.size(); ++k) {
    const Token& t = c.words[k];
    if (t.kind == Tk::word && !t.text.empty() && t.text[0] == '-') {
      assoc = assoc || t.text.find('A') != std::string::npos;
      nameref = nameref || t.text.find('n') != std::string::npos;
      continue;
    }
    if (nameref && t.kind == Tk::word && t.text.find('=') != std::string::npos) {  // local -n ref=$1
      const std::string target = expand_one(Token{Tk::word, t.text.substr(t.text.find('=') + 1), t.line, {}}).text.s;
      refs[t.text.substr(0, t.text.find('='))] = target;
      continue;
    }
    if (t.kind == Tk::array || t.text.find('=') != std::string::npos) {
      assign(t, assoc);
    } else if (assoc && !vars.contains(t.text)) {
      vars[t.text] = Var{{}, {}, true};
    }
  }
  return Status{};
}

std::optional<Value> Shell::printf_known(const std::vector<Field>& args) {
  for (std::size_t k = 3; k < args.size(); ++k) {
    if (!args[k].depends_on.empty()) return std::nullopt;
  }
  std::size_t at = 3;
  if (args[at].text.s == "--") ++at;  // printf -v NAME -- FORMAT ...
  if (at >= args.size()) return std::nullopt;
  const std::string& format = args[at].text.s;
  if (format.find('\\') != std::string::npos) return std::nullopt;  // escapes are not evaluated
  std::size_t specifiers = 0;
  for (std::size_t k = 0; k < format.size(); ++k) {
    if (format[k] != '%') continue;
    if (k + 1 >= format.size() || (format[k + 1] != 's' && format[k + 1] != 'd' && format[k + 1] != '%')) return std::nullopt;
    if (format[k + 1] != '%') ++specifiers;
    ++k;
  }
  std::string out;
  std::size_t next = at + 1;
  do {
    for (std::size_t k = 0; k < format.size(); ++k) {
      if (format[k] != '%') {
        out += format[k];
        continue;
      }
      const char spec = format[++k];
      if (spec == '%') out += '%';
      else if (next < args.size()) out += args[next++].text.s;
      else if (spec == 'd') out += '0';
    }
  } while (specifiers > 0 && next < args.size());
  charge(out.size(), args.front().text.line_at(0));
  Value v;
  for (const char ch : out) v.text.add(ch, args.front().text.line_at(0));
  v.depends_on = taint_;
  return v;
}

std::optional<Status> Shell::run_capture(const std::vector<Field>& args) {
  namespace fs = std::filesystem;
  const std::string& name = args.front().text.s;
  std::vector<std::string> rest;
  for (std::size_t k = 1; k < args.size(); ++k) {
    if (!args[k].depends_on.empty()) {
      capture_unknown = args[k].depends_on;
      return unknown(capture_unknown);
    }
    if (name != "echo" && args[k].text.s.size() > 1 && args[k].text.s[0] == '-') continue;  // readlink -f
    rest.push_back(args[k].text.s);
  }
  std::string out;
  if (name == "yq") return run_yq(args);
  if (name == "tr" || name == "envsubst") return Status{};  // in a pipe: the text passes on (word splitting reads \n as a space)
  if (name == "cd" && rest.size() == 1) {  // prints nothing; pwd then prints the directory
    const fs::path to(rest.front());
    cwd_ = (to.is_relative() && cwd_ ? fs::path(*cwd_) / to : to).lexically_normal().string();
    return Status{};
  }
  if (name == "echo") {
    for (std::size_t k = 0; k < rest.size(); ++k) out += (k > 0 ? " " : "") + rest[k];
  } else if (name == "pwd" && rest.empty() && cwd_) {
    out = *cwd_;
  } else if ((name == "dirname" || name == "basename" || name == "readlink" || name == "realpath") && rest.size() == 1) {
    const fs::path p(rest.front());
    out = name == "dirname" ? (p.has_parent_path() ? p.parent_path().string() : ".")
          : name == "basename" ? p.filename().string()
                               : p.lexically_normal().string();
  } else {
    return std::nullopt;
  }
  *capture += out + "\n";
  return Status{};
}

std::optional<Status> Shell::run_builtin(const std::vector<Field>& args, const Command& c, std::size_t at) {
  const std::string& name = args.front().text.s;
  auto rest = [&] { return std::vector<Field>(args.begin() + 1, args.end()); };
  if (name == "export" || name == "declare" || name == "typeset" || name == "local" || name == "readonly") {
    return run_declare(c, at);
  }
  if (name == "source" || name == ".") {
    if (args.size() < 2) return Status{};
    return run_file(args[1], std::vector<Field>(args.begin() + 2, args.end()), true, c.line);
  }
  if (name == "eval") {
    std::string text;
    for (std::size_t k = 1; k < args.size(); ++k) text += (k > 1 ? " " : "") + args[k].text.s;
    run_text(text, c.line, source(), depth_ + 1);
    return Status{};
  }
  if (name == "exit" || name == "return") {
    if (!taint_.empty() || capture != nullptr) return unknown(taint_);
    (name == "exit" ? exiting_ : returning_) = true;
    if (name == "exit") sh_.run->notes.push_back(fmt::format("{}: exit (the script stops here)", where(c.line)));
    return Status{};
  }
  if (name == "shift") {
    // Moves every remaining argument: charged, so that a shift loop over many arguments is bounded.
    charge(0, c.line, positional.size());
    if (!positional.empty()) positional.erase(positional.begin());
    return Status{};
  }
  if (name == "set") {
    if (args.size() > 1 && args[1].text.s == "--") {
      positional.clear();
      for (std::size_t k = 2; k < args.size(); ++k) positional.push_back(Value{args[k].text, args[k].depends_on});
    }
    return Status{};
  }
  if (name == "unset") {
    for (std::size_t k = 1; k < args.size(); ++k) vars.erase(args[k].text.s);
    return Status{};
  }
  if (name == "true" || name == ":") return known(true);
  if (name == "false") return known(false);
  if (name == "[[" || name == "[" || name == "test") {
    std::vector<Field> t = rest();
    if (name != "test" && !t.empty()) t.pop_back();  // ]] or ]
    if (name == "[[") {  // no word splitting inside [[ ]]
      t.clear();
      for (std::size_t k = at + 1; k + 1 < c.words.size(); ++k) {
        std::vector<Field> one = expand(c.words[k]);  // for the unset placeholder
        const Value v = expand_one(c.words[k]);
        const char q = c.words[k].text.empty() ? '\0' : c.words[k].text[0];
        const bool unset = one.size() == 1 && one.front().unset;
        t.push_back(Field{unset ? one.front().text : v.text, v.depends_on, q == '"' || q == '\'', unset});
      }
    }
    return test(t, name == "[[");
  }
  if (name == "shopt" || name == "alias") {
    return Status{};
  }
  // printf -v NAME FORMAT ARGS... with every argument known and a format of %s, %d and %% only:
  // bash's formatting, the format reused while arguments remain.
  if (name == "printf" && args.size() > 3 && args[1].text.s == "-v") {
    if (auto v = printf_known(args)) {
      vars[args[2].text.s] = Var{{std::move(*v)}, {}, false};
      return Status{};
    }
  }
  // Builtins that set variables from input moemem does not read (a here-document, a pipe, a
  // file): read NAME..., mapfile/readarray [NAME] (MAPFILE by default), printf -v NAME. Each
  // target holds a value the script cannot be known to give, so a launch that expands it is
  // refused rather than run without its flags.
  if (name == "read" || name == "mapfile" || name == "readarray" || (name == "printf" && args.size() > 2 && args[1].text.s == "-v")) {
    std::vector<std::string> targets;
    if (name == "printf") {
      targets.push_back(args[2].text.s);
    } else {
      // Options that take a value (read -d DELIM -p PROMPT -n N -t T -u FD -a; mapfile -d -n -O -s -u -C -c).
      const std::string with_value = name == "read" ? "dpntuNa" : "dnOsuCc";
      for (std::size_t k = 1; k < args.size(); ++k) {
        const std::string& w = args[k].text.s;
        if (w.size() >= 2 && w[0] == '-') {
          const char opt = w.back();
          if (name == "read" && opt == 'a' && w.size() == 2 && k + 1 < args.size()) targets.push_back(args[++k].text.s);
          else if (with_value.find(opt) != std::string::npos && w.size() == 2) ++k;
          continue;
        }
        targets.push_back(w);
      }
      if (targets.empty()) targets.emplace_back(name == "read" ? "REPLY" : "MAPFILE");
      if (name != "read") targets.erase(targets.begin(), targets.end() - 1);  // mapfile's one array
    }
    const std::string why = fmt::format("`{}` at line {} (its input is not read)", name, c.line);
    for (const auto& t : targets) {
      Value v;
      for (const char ch : "${" + t + "}") v.text.add(ch, c.line);
      v.depends_on = why;
      vars[t] = Var{{v}, {}, false};
    }
    return Status{};
  }
  return std::nullopt;
}

}  // namespace moemem::detail

namespace moemem::detail {

Value Shell::command_output(const std::string& text, std::int64_t line) {
  std::string out;
  charge_copy(line);  // the subshell copies every variable and function
  Shell child(*this);
  child.capture = &out;
  child.capture_unknown.clear();
  child.taint_.clear();
  child.run_text(text, line, source_, depth_ + 1);
  Value v;
  if (!child.capture_unknown.empty()) {
    for (const char c : "$(" + text + ")") v.text.add(c, line);
    v.depends_on = child.capture_unknown;
    return v;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  charge(out.size(), line);
  for (const char c : out) v.text.add(c, line);
  return v;
}

}  // namespace moemem::detail
