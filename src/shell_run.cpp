// Launch-script shell: running commands (see shell_internal.hpp).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "shell_eval.hpp"

namespace moemem::detail {

namespace {

// NAME=, NAME+=, NAME[i]= at the start of a raw word: the length of the name part, else 0.
std::size_t assignment_name(const std::string& w) {
  if (w.empty() || !(std::isalpha(static_cast<unsigned char>(w[0])) || w[0] == '_')) return 0;
  std::size_t k = 0;
  while (k < w.size() && is_name_char(w[k])) ++k;
  if (k < w.size() && w[k] == '[') {
    const std::size_t e = w.find(']', k);
    if (e == std::string::npos) return 0;
    k = e + 1;
  }
  if (k < w.size() && w[k] == '+') ++k;
  return k < w.size() && w[k] == '=' ? k : 0;
}

bool is_assignment(const Token& t) { return t.kind == Tk::array || (t.kind == Tk::word && assignment_name(t.text) > 0); }

// Commands that launch nothing: their words are not a launch's.
const std::set<std::string, std::less<>> kQuiet = {
    "echo", "printf", "mkdir", "cd", "rm", "cp", "mv", "ls", "cat", "touch", "tee", "date", "sleep", "pip", "pip3",
    "git", "wget", "curl", "chmod", "ln", "trap", "wait", "pushd", "popd", "ulimit", "umask", "hostname", "nvidia-smi",
    "envsubst", "yq", "jq", "grep", "sed", "awk", "head", "tail", "tr", "cut", "sort", "wc", "find", "xargs", "read",
    "dirname", "basename", "readlink", "realpath", "pwd", "scontrol", "nproc", "seq", "cmp", "diff", "tar",
    "command", "type", "hash", "which", "shuf"};

}  // namespace

ShellRun run_shell(std::string_view text, const std::string& path) {
  ShellRun out;
  Shared shared{&out, {}, 0, 0};
  Shell sh(shared, path);
  sh.run_text(text, 1, path.empty() ? std::string("arguments") : path, 0);
  return out;
}

void Shell::run_text(std::string_view text, std::int64_t first_line, const std::string& source, int depth) {
  if (depth > kMaxShellDepth) {
    throw InputError(where(first_line), fmt::format("nesting deeper than {}", kMaxShellDepth),
                     "a script whose source, functions and $(...) nest less deeply");
  }
  const std::string saved_source = source_;
  const int saved_depth = depth_;
  source_ = source;
  depth_ = depth;
  const CommandList commands = parse_shell(lex_shell(text, first_line, source), source);
  run_list(commands);
  source_ = saved_source;
  depth_ = saved_depth;
}

Status Shell::with_taint(const std::string& reason, const CommandList& l) {
  const std::string saved = taint_;
  if (taint_.empty()) taint_ = reason;
  run_list(l);
  taint_ = saved;
  return Status{Status::Kind::unknown, reason};
}

Status Shell::run_list(const CommandList& l) {
  Status last;
  for (std::size_t i = 0; i < l.size() && !exiting_ && !returning_; ++i) {
    last = run_command(*l[i]);
    while (l[i]->next != Command::Next::none && i + 1 < l.size() && !exiting_ && !returning_) {
      const Command::Next how = l[i]->next;
      ++i;
      const bool pipe = how == Command::Next::pipe;
      const bool wanted = how == Command::Next::and_then ? last.kind == Status::Kind::ok : last.kind == Status::Kind::failed;
      if (pipe || wanted) {
        last = run_command(*l[i]);
      } else if (last.kind == Status::Kind::unknown) {
        CommandList one{l[i]};
        last = with_taint(last.reason, one);
      }
    }
  }
  return last;
}

Status Shell::run_command(const Command& c) {
  if (++sh_.commands > kMaxShellCommands) {
    throw InputError(where(c.line), fmt::format("more than {} commands run", kMaxShellCommands),
                     "a script that runs fewer commands (the shell's command limit)");
  }
  Status s;
  switch (c.kind) {
    case Command::Kind::simple: s = run_simple(c); break;
    case Command::Kind::if_: s = run_if(c); break;
    case Command::Kind::case_: s = run_case(c); break;
    case Command::Kind::for_: s = run_for(c); break;
    case Command::Kind::loop:
      sh_.run->notes.push_back(fmt::format("{}: a {} loop, not run", where(c.line), c.name));
      break;
    case Command::Kind::group: s = run_list(c.bodies.front()); break;
    case Command::Kind::function: functions_[c.name] = c.bodies.front(); break;
  }
  if (c.negate && s.kind != Status::Kind::unknown) s.kind = s.kind == Status::Kind::ok ? Status::Kind::failed : Status::Kind::ok;
  return s;
}

Status Shell::run_if(const Command& c) {
  for (std::size_t k = 0; k < c.conditions.size(); ++k) {
    const Status s = run_list(c.conditions[k]);
    if (s.kind == Status::Kind::ok) return run_list(c.bodies[k]);
    if (s.kind == Status::Kind::unknown) {
      const std::string reason = fmt::format("the test on line {} ({})", c.conditions[k].front()->line, s.reason);
      for (std::size_t b = k; b < c.bodies.size(); ++b) with_taint(reason, c.bodies[b]);
      return Status{Status::Kind::unknown, reason};
    }
  }
  if (c.bodies.size() > c.conditions.size()) return run_list(c.bodies.back());
  return Status{};
}

Status Shell::run_case(const Command& c) {
  const Value word = expand_one(c.words.front());
  for (std::size_t k = 0; k < c.patterns.size(); ++k) {
    for (const Token& p : c.patterns[k]) {
      const Value pat = expand_one(p);
      const std::string unknown = !word.depends_on.empty() ? word.depends_on : pat.depends_on;
      if (!unknown.empty()) {
        const std::string reason = fmt::format("the case on line {} ({})", c.line, unknown);
        for (std::size_t b = k; b < c.bodies.size(); ++b) with_taint(reason, c.bodies[b]);
        return Status{Status::Kind::unknown, reason};
      }
      if (shell_glob(pat.text.s, word.text.s)) return run_list(c.bodies[k]);
    }
  }
  return Status{};
}

// for ((init; test; step)) with the forms launch scripts use: init NAME=EXPR, test an arithmetic
// expression, step NAME++, ++NAME, NAME--, --NAME, NAME+=EXPR, NAME-=EXPR or NAME=EXPR. Run while
// every value is known, within the shell's command limit; otherwise the loop is not run (noted).
Status Shell::run_c_for(const Command& c) {
  const std::string& header = c.words.front().text;
  const std::int64_t line = c.words.front().line;
  std::vector<std::string> parts;
  std::size_t from = 0;
  for (std::size_t k = 0; k <= header.size(); ++k) {
    if (k == header.size() || header[k] == ';') {
      parts.push_back(header.substr(from, k - from));
      from = k + 1;
    }
  }
  const auto trim = [](std::string x) {
    while (!x.empty() && std::isspace(static_cast<unsigned char>(x.front()))) x.erase(x.begin());
    while (!x.empty() && std::isspace(static_cast<unsigned char>(x.back()))) x.pop_back();
    return x;
  };
  // A loop whose start, test or step is not known runs its body once under that taint: what it
  // sets and the words it reaches depend on the unknown, so a flag built from them is refused.
  const auto not_run = [&](const std::string& why) {
    const std::string reason = fmt::format("the for loop on line {} ({})", c.line, why);
    sh_.run->notes.push_back(fmt::format("{}: a for (({})) loop, not evaluated ({})", where(c.line), header, why));
    with_taint(reason, c.bodies.front());
    return Status{Status::Kind::unknown, reason};
  };
  if (parts.size() != 3) return not_run("not init; test; step");
  const auto value_of = [&](const std::string& expr) -> std::optional<std::int64_t> {
    std::string depends;
    const auto v = arith(expr.empty() ? "1" : expr, line, depends);
    if (!v || !depends.empty()) return std::nullopt;
    return v;
  };
  const auto set = [&](const std::string& name, std::int64_t v) {
    Value x;
    for (const char ch : std::to_string(v)) x.text.add(ch, line);
    x.depends_on = taint_;
    vars[name] = Var{{x}, {}, false};
  };
  // NAME op EXPR, NAME++ and the like: false when the form is not one of them or a value is unknown.
  const auto step = [&](const std::string& raw) -> bool {
    const std::string e = trim(raw);
    if (e.empty()) return true;
    std::string name = e;
    std::int64_t delta = 0;
    bool absolute = false;
    std::string rhs;
    if (e.size() > 2 && (e.starts_with("++") || e.starts_with("--"))) {
      name = e.substr(2);
      delta = e[0] == '+' ? 1 : -1;
    } else if (e.size() > 2 && (e.ends_with("++") || e.ends_with("--"))) {
      name = e.substr(0, e.size() - 2);
      delta = e.back() == '+' ? 1 : -1;
    } else if (const auto eq = e.find('='); eq != std::string::npos && eq > 0) {
      const char op = e[eq - 1];
      name = trim(e.substr(0, op == '+' || op == '-' ? eq - 1 : eq));
      rhs = e.substr(eq + 1);
      absolute = op != '+' && op != '-';
      const auto r = value_of(rhs);
      if (!r || (op == '-' && *r == std::numeric_limits<std::int64_t>::min())) return false;
      delta = op == '-' ? -*r : *r;
    } else {
      return false;
    }
    name = trim(name);
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_name_char)) return false;
    std::int64_t now = 0;
    if (!absolute) {
      const auto cur = value_of(name);
      if (!cur) return false;
      now = *cur;
    }
    std::int64_t next = 0;
    if (__builtin_add_overflow(now, delta, &next)) return false;
    set(name, next);
    return true;
  };
  if (!step(parts[0])) return not_run("its start is not known");
  Status s;
  for (std::int64_t n = 0;; ++n) {
    if (n > kMaxShellCommands) return not_run("too many iterations");
    const auto test = value_of(trim(parts[1]));
    if (!test) return not_run("its test is not known");
    if (*test == 0) break;
    s = run_list(c.bodies.front());
    if (exiting_ || returning_) break;
    if (!step(parts[2])) return not_run("its step is not known");
  }
  return s;
}

Status Shell::run_for(const Command& c) {
  if (c.name.empty()) return run_c_for(c);
  std::vector<Field> items;
  for (const Token& w : c.words) {
    for (auto& f : expand(w)) items.push_back(std::move(f));
  }
  Status s;
  for (const Field& f : items) {
    vars[c.name] = Var{{Value{f.text, f.depends_on}}, {}, false};
    s = f.depends_on.empty() || !taint_.empty() ? run_list(c.bodies.front())
                                                 : with_taint(f.depends_on, c.bodies.front());
    if (exiting_ || returning_) break;
  }
  return s;
}

void Shell::assign(const Token& w, bool assoc) {
  const bool array = w.kind == Tk::array;
  const std::size_t name_end = array ? w.text.size() - 1 : assignment_name(w.text);
  const bool append = name_end > 0 && w.text[name_end - 1] == '+';
  std::string name = w.text.substr(0, append ? name_end - 1 : name_end), index;
  if (const auto b = name.find('['); b != std::string::npos) {
    index = expand_one(Token{Tk::word, name.substr(b + 1, name.size() - b - 2), w.line, {}}).text.s;
    name = name.substr(0, b);
  }
  Var& v = vars[name];
  std::size_t bytes = 0, words = 0;
  if (array) {
    if (!append) v = Var{};
    v.is_array = true;
    for (const Token& e : w.elements) {
      const std::size_t close = e.text.find("]=");
      if (!e.text.empty() && e.text[0] == '[' && close != std::string::npos) {
        const std::string key = expand_one(Token{Tk::word, e.text.substr(1, close - 1), e.line, {}}).text.s;
        Value val = expand_one(Token{Tk::word, e.text.substr(close + 2), e.line, {}});
        if (val.depends_on.empty()) val.depends_on = taint_;
        bytes += val.text.s.size();
        ++words;
        v.assoc[key] = std::move(val);
        continue;
      }
      for (auto& f : expand(e)) {
        bytes += f.text.s.size();
        ++words;
        v.items.push_back(Value{std::move(f.text), f.depends_on});
      }
    }
    charge(bytes, w.line, words);
    return;
  }
  Value val = expand_one(Token{Tk::word, w.text.substr(name_end + 1), w.line, {}});
  if (val.depends_on.empty()) val.depends_on = taint_;
  if (assoc || !v.assoc.empty() || (!index.empty() && !std::all_of(index.begin(), index.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      }))) {
    v.assoc[index] = std::move(val);
    return;
  }
  const std::size_t at = index.empty() ? 0 : static_cast<std::size_t>(std::stoul(index.substr(0, 9)));
  if (at >= kMaxShellArrayIndex) {
    throw InputError(where(w.line), fmt::format("index {}", at), fmt::format("an array index below {}", kMaxShellArrayIndex));
  }
  const std::size_t added = v.items.size() <= at ? at + 1 - v.items.size() : 0;  // empty slots made
  if (added > 0) v.items.resize(at + 1);
  Value& slot = v.items[at];
  if (append) {
    slot.text.add(val.text);
    if (slot.depends_on.empty()) slot.depends_on = val.depends_on;
  } else {
    slot = std::move(val);
  }
  charge(slot.text.s.size(), w.line, std::max<std::size_t>(added, 1));
}

void Shell::emit(const std::vector<Field>& words) {
  if (capture != nullptr) return;
  for (const Field& f : words) {
    sh_.run->words.push_back(ShellWord{f.text.s, f.text.marks.empty() ? 0 : f.text.marks.front().second,
                                       f.depends_on.empty() ? taint_ : f.depends_on});
  }
}

Status Shell::run_simple(const Command& c) {
  std::size_t at = 0;
  while (at < c.words.size() && is_assignment(c.words[at])) ++at;
  if (at < c.words.size() && c.words[at].kind == Tk::arith) {  // (( expression ))
    std::string depends;
    const auto v = arith(c.words[at].text, c.words[at].line, depends);
    if (!v) return Status{Status::Kind::unknown, depends};
    return Status{*v != 0 ? Status::Kind::ok : Status::Kind::failed, ""};
  }
  std::vector<Field> args;
  for (std::size_t k = at; k < c.words.size(); ++k) {
    if (c.words[k].kind == Tk::array) continue;
    for (auto& f : expand(c.words[k])) args.push_back(std::move(f));
  }
  if (args.empty()) {  // assignments alone set the shell's variables
    for (std::size_t k = 0; k < at; ++k) assign(c.words[k], false);
    return Status{};
  }
  // Assignments before a command hold for that command only: the prefixed names' values before it
  // (not a copy of every variable, which made each such command cost the whole environment).
  const auto prefix_name = [&](std::size_t k) { return c.words[k].text.substr(0, c.words[k].text.find_first_of("[+=")); };
  std::vector<std::pair<std::string, std::optional<Var>>> saved;
  for (std::size_t k = 0; k < at; ++k) {
    std::string name = prefix_name(k);
    const auto old = vars.find(name);
    if (old != vars.end()) charge_var(old->second, c.line);  // saved, and restored below
    saved.emplace_back(std::move(name), old != vars.end() ? std::optional<Var>(old->second) : std::nullopt);
  }
  for (std::size_t k = 0; k < at; ++k) assign(c.words[k], false);
  Status s;
  if (const auto f = functions_.find(args.front().text.s); f != functions_.end()) {
    std::vector<Value> saved_args = std::move(positional);
    positional.clear();
    for (std::size_t k = 1; k < args.size(); ++k) positional.push_back(Value{args[k].text, args[k].depends_on});
    if (depth_ >= kMaxShellDepth) throw InputError(where(c.line), "functions calling functions too deeply", "less nesting");
    ++depth_;
    s = run_list(f->second);
    --depth_;
    returning_ = false;
    positional = std::move(saved_args);
  } else if (const auto b = run_builtin(args, c, at)) {
    s = *b;
  } else {
    s = run_external(args, c.line);
  }
  if (args.front().text.s != "export") {
    // keep what the command itself set (export, source, functions) apart from the prefixes
    for (auto& [name, old] : saved) {
      if (old) vars[name] = std::move(*old);
      else vars.erase(name);
    }
  }
  return s;
}

Status Shell::run_external(const std::vector<Field>& args, std::int64_t line) {
  const std::string& name = args.front().text.s;
  if (capture != nullptr) {
    if (const auto s = run_capture(args)) return *s;
    if (capture_unknown.empty()) capture_unknown = fmt::format("the output of `{}`", name);
    return Status{Status::Kind::unknown, capture_unknown};
  }
  const std::string base = std::filesystem::path(name).filename().string();
  if (kQuiet.contains(base)) return Status{Status::Kind::unknown, fmt::format("the exit status of `{}`", name)};
  // A launcher running `bash -c TEXT` (srun ... bash -c "$CMD") or a script file.
  for (std::size_t k = 0; k < args.size(); ++k) {
    const std::string b = std::filesystem::path(args[k].text.s).filename().string();
    if (b != "bash" && b != "sh") continue;
    std::vector<Field> before(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(k));
    emit(before);
    std::size_t f = k + 1;
    while (f < args.size() && args[f].text.s.size() > 1 && args[f].text.s[0] == '-' && args[f].text.s != "-c") ++f;
    if (f >= args.size()) return Status{};
    if (args[f].text.s == "-c" && f + 1 < args.size()) {
      charge_copy(line);  // the child copies every variable and function
      Shell child(*this);
      child.run_text(args[f + 1].text.s, args[f + 1].text.line_at(0), source_, depth_ + 1);
      return Status{Status::Kind::unknown, "the exit status of `bash -c`"};
    }
    return run_file(args[f], std::vector<Field>(args.begin() + static_cast<std::ptrdiff_t>(f) + 1, args.end()), false,
                    line);
  }
  emit(args);
  return Status{Status::Kind::unknown, fmt::format("the exit status of `{}`", name)};
}

Status Shell::run_file(const Field& file, const std::vector<Field>& args, bool same_shell, std::int64_t line) {
  namespace fs = std::filesystem;
  const std::string& name = file.text.s;
  std::error_code ec;
  fs::path p(name);
  if (file.depends_on.empty() && p.is_relative() && !fs::is_regular_file(p, ec)) {
    p = fs::path(source_).parent_path() / name;
  }
  if (!file.depends_on.empty() || !fs::is_regular_file(p, ec)) {
    const std::string why = !file.depends_on.empty() ? file.depends_on : "no such file";
    sh_.run->notes.push_back(fmt::format("{}: {} not read ({})", where(line), name, why));
    return Status{Status::Kind::unknown, fmt::format("the file {} ({})", name, why)};
  }
  if (fs::file_size(p, ec) > kMaxShellValueBytes) {
    throw InputError(where(line), p.string(), fmt::format("a file of at most {} bytes", kMaxShellValueBytes));
  }
  std::ifstream in(p, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  // Each reading parses the file again: its bytes count against the expansion limit, so that a
  // large file sourced in a loop is bounded.
  check_limits(0, text.str().size(), line);
  sh_.expanded += text.str().size();
  if (same_shell) {
    charge(0, line, positional.size());  // the arguments copied aside, each charged
    std::vector<Value> saved = positional;
    if (!args.empty()) {
      positional.clear();
      for (const Field& a : args) positional.push_back(Value{a.text, a.depends_on});
    }
    run_text(text.str(), 1, p.string(), depth_ + 1);
    positional = std::move(saved);
    exiting_ = false;
    returning_ = false;
    return Status{};
  }
  charge_copy(line);  // the child copies every variable and function
  Shell child(*this);
  child.path_ = p.string();  // $0 of the script run
  child.positional.clear();
  for (const Field& a : args) child.positional.push_back(Value{a.text, a.depends_on});
  child.run_text(text.str(), 1, p.string(), depth_ + 1);
  return Status{Status::Kind::unknown, fmt::format("the exit status of {}", name)};
}

}  // namespace moemem::detail
