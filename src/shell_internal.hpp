// A small evaluator for the bash that launch scripts are written in (src/shell_*.cpp), private to
// the Megatron script reader. It runs a script as far as it can without running any program:
// variables with bash's word splitting, arrays, ${VAR:-x} and its kin, $((...)) arithmetic,
// if/case/for on what the script itself sets, functions, `source` and `bash FILE` relative to the
// script, `bash -c TEXT` and `eval`. Every other command is a launch whose words are collected.
// What cannot be known (a variable the script never sets, a program's output, a test on the
// file system) is carried along as a dependency of each word it reaches, so that the reader can
// refuse exactly the memory-relevant flags that depend on it. Expansion is bounded.
#pragma once

#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moemem::detail {

// Bounds on what a script may make the evaluator do, each refused by name when passed.
inline constexpr std::size_t kMaxShellValueBytes = std::size_t{1} << 20;      // one word or variable
inline constexpr std::size_t kMaxShellExpansionBytes = std::size_t{64} << 20; // all expansion of one script
// What each word or array element counts against kMaxShellExpansionBytes beside its text (about
// what the evaluator allocates for one: text, line marks, dependency), so that empty words and
// array slots are bounded too.
inline constexpr std::size_t kShellWordBytes = 256;
inline constexpr std::int64_t kMaxShellCommands = std::int64_t{1} << 16;      // commands run, loops included
inline constexpr int kMaxShellDepth = 32;  // nesting of source, functions, bash FILE, $(...)
inline constexpr int kMaxShellNesting = 200;  // nesting of if/case/loops/groups, ${...}, $((...)), test parentheses
inline constexpr std::size_t kMaxShellArrayIndex = std::size_t{1} << 16;

// A character of a shell variable name after its first: a letter, a digit or an underscore.
inline bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Text that remembers the script line of each of its characters: a mark where the line changes,
// at most kMaxTextMarks of them (a value pieced together from many lines, "$a $a" doubled, would
// otherwise keep a mark per character: 16 times its bytes, outside the expansion limits); past
// that, the rest of the text is taken to be on the last mark's line.
inline constexpr std::size_t kMaxTextMarks = 4096;
struct Text {
  std::string s;
  std::vector<std::pair<std::size_t, std::int64_t>> marks;  // (offset, line) from that offset on
  void add(char c, std::int64_t line);
  void add(const Text& t);
  [[nodiscard]] std::int64_t line_at(std::size_t offset) const;
  [[nodiscard]] Text slice(std::size_t from, std::size_t to) const;
};

// A word a launch command receives.
struct ShellWord {
  std::string text;
  std::int64_t line = 0;
  std::string depends_on;  // empty: known; else what the word depends on that the script does not set
};

struct ShellRun {
  std::vector<ShellWord> words;    // the words of every command run, in order
  std::vector<std::string> notes;  // what was not evaluated and did not reach a word
};

// Runs `text`, the file `path` (for $0, `source` and `bash FILE` relative to it; empty when the
// text is not a file). Throws InputError naming "<path>: line N" for a limit passed or a syntax
// error that makes the script unreadable.
[[nodiscard]] ShellRun run_shell(std::string_view text, const std::string& path);

// --- the parts of the evaluator ---------------------------------------------------------

enum class Tk : std::uint8_t { word, op, newline, array, arith, end };

struct Token {
  Tk kind = Tk::end;
  std::string text;  // a word as written (quotes included), an operator, or an arith body
  std::int64_t line = 0;
  std::vector<Token> elements;  // Tk::array: NAME=( elements ), text is "NAME=" or "NAME+="
};

// Splits shell text into tokens; heredoc bodies are dropped. `source` names the text in errors.
[[nodiscard]] std::vector<Token> lex_shell(std::string_view text, std::int64_t first_line, const std::string& source);

struct Command;
using CommandList = std::vector<std::shared_ptr<const Command>>;

struct Command {
  enum class Kind : std::uint8_t { simple, if_, case_, for_, loop, group, function };
  Kind kind = Kind::simple;
  std::int64_t line = 0;
  std::vector<Token> words;               // simple: words and array assignments; for: the list; case: the word
  std::vector<CommandList> conditions;    // if: each condition; loop: the condition
  std::vector<CommandList> bodies;        // if: each branch (else last); case: each item; for/loop/group/function
  std::vector<std::vector<Token>> patterns;  // case: each item's patterns
  std::string name;                       // for: the variable; function: its name
  bool negate = false;                    // `! command`
  // The commands that follow: `&&` (and_then), `||` (or_else) or `|` (pipe); none for the last.
  enum class Next : std::uint8_t { none, and_then, or_else, pipe };
  Next next = Next::none;
};

// The commands of the tokens. Throws InputError on an unfinished if/case/loop or quote.
[[nodiscard]] CommandList parse_shell(const std::vector<Token>& tokens, const std::string& source);

}  // namespace moemem::detail
