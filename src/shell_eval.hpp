// The launch-script shell's state and evaluation (shell_expand.cpp: words; shell_run.cpp:
// commands). Private to src/shell_*.cpp.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shell_internal.hpp"

namespace moemem::detail {

// A value and what it depends on that the script does not set (empty: known).
struct Value {
  Text text;
  std::string depends_on;
};

struct Var {
  std::vector<Value> items;             // a scalar is one item
  std::map<std::string, Value> assoc;   // declare -A
  bool is_array = false;
};

// One word after expansion.
struct Field {
  Text text;
  std::string depends_on;
  bool keep = false;   // quoted: a word even when empty
  bool unset = false;  // only a variable the script does not set (the text is its placeholder)
};

// A command's success: known, or unknown with the reason.
struct Status {
  enum class Kind : std::uint8_t { ok, failed, unknown };
  Kind kind = Kind::ok;
  std::string reason;
};

// Counters all the shells of one script share (a $(...) or `bash FILE` runs in its own).
struct Shared {
  ShellRun* run = nullptr;
  std::set<std::string> noted;
  std::size_t expanded = 0;
  std::int64_t commands = 0;
};

class Shell {
 public:
  Shell(Shared& shared, std::string path) : sh_(shared), path_(std::move(path)) {}

  // Runs script text (of file `source`, its lines from `first_line`).
  void run_text(std::string_view text, std::int64_t first_line, const std::string& source, int depth);

  std::map<std::string, Var> vars;
  std::vector<Value> positional;
  std::map<std::string, std::string> refs;  // local -n NAME=TARGET
  std::string* capture = nullptr;     // inside $(...): the output, else null
  std::string capture_unknown;        // inside $(...): why the output cannot be known

  // --- shell_expand.cpp
  [[nodiscard]] std::vector<Field> expand(const Token& w);  // with word splitting
  [[nodiscard]] Value expand_one(const Token& w);           // as one word (assignments, tests, case)
  [[nodiscard]] bool is_set(const std::string& name_and_index, std::int64_t line);
  void note(const std::string& text);  // once per text
  [[nodiscard]] std::optional<std::int64_t> arith(const std::string& expr, std::int64_t line, std::string& depends);
  // Counts `bytes` of text in `words` words (or array slots) against the expansion limits.
  void charge(std::size_t bytes, std::int64_t line, std::size_t words = 1);
  // Charges what copying a variable makes (its text, and a word per slot).
  void charge_var(const Var& v, std::int64_t line);
  // Charges what copying this whole shell for $(...) or `bash` makes: every variable, positional
  // argument and function.
  void charge_copy(std::int64_t line);
  // Throws as charge would for a word of `word_bytes` and `pending` bytes more of expansion (a
  // word still growing; charged once done).
  void check_limits(std::size_t word_bytes, std::size_t pending, std::int64_t line) const;
  [[nodiscard]] std::string where(std::int64_t line) const;

  // Counts one level of nested expansion for its lifetime; throws past kMaxShellNesting.
  class Nesting {
   public:
    Nesting(Shell& sh, std::int64_t line);
    ~Nesting() { --sh_.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    Shell& sh_;
  };

  // --- shell_run.cpp
  Status run_list(const CommandList& l);
  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  Shared& sh_;
  std::string path_;       // $0: the script first run
  std::string source_;     // the file being read, for error messages
  // A directory `cd` moved to inside a $(...) (the `$(cd DIR && pwd)` idiom for a script's own
  // directory): what `pwd` prints there; unset, pwd's output is not known.
  std::optional<std::string> cwd_;
  std::string taint_;      // inside a branch taken without knowing whether it would be
  int depth_ = 0;
  int nesting_ = 0;  // ${...}, $((...)), tests and parentheses being evaluated
  bool exiting_ = false, returning_ = false;
  std::map<std::string, CommandList> functions_;

  // shell_expand.cpp
  struct Expander;
  [[nodiscard]] std::optional<std::vector<Value>> lookup(const std::string& name, const std::string& index,
                                                         std::int64_t line);
  [[nodiscard]] Value command_output(const std::string& text, std::int64_t line);

  // shell_run.cpp
  Status run_command(const Command& c);
  Status run_simple(const Command& c);
  Status run_if(const Command& c);
  Status run_case(const Command& c);
  Status run_for(const Command& c);
  std::optional<Status> run_builtin(const std::vector<Field>& args, const Command& c, std::size_t at);
  std::optional<Status> run_capture(const std::vector<Field>& args);
  // printf -v's value when its arguments are known and its format is %s/%d/%% only.
  std::optional<Value> printf_known(const std::vector<Field>& args);
  Status run_c_for(const Command& c);
  std::optional<Status> run_yq(const std::vector<Field>& args);
  Status run_declare(const Command& c, std::size_t at);
  Status run_file(const Field& file, const std::vector<Field>& args, bool same_shell, std::int64_t line);
  Status run_external(const std::vector<Field>& args, std::int64_t line);
  Status test(const std::vector<Field>& args, bool double_bracket);
  void assign(const Token& w, bool assoc);
  void emit(const std::vector<Field>& words);
  Status with_taint(const std::string& reason, const CommandList& l);
};

// bash's pattern matching (*, ?, [...]) of `text` against `pattern`.
[[nodiscard]] bool shell_glob(std::string_view pattern, std::string_view text);

// "a b" -> the tokens of that text as one word would be written in double quotes.
[[nodiscard]] Token quoted_token(const std::string& text, std::int64_t line);

}  // namespace moemem::detail
