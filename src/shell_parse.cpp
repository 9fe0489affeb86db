// Launch-script shell: tokens and commands (see shell_internal.hpp).
#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "moemem/errors.hpp"
#include "shell_internal.hpp"

namespace moemem::detail {

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }
bool is_op_char(char c) { return c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '<' || c == '>'; }

// Words after which a new command starts.
const std::set<std::string, std::less<>> kCommandStarters = {"if", "then", "else", "elif", "do", "while", "until",
                                                              "!", "{", "}", "fi", "done", "esac", "in"};

class Lexer {
 public:
  Lexer(std::string_view text, std::int64_t line, const std::string& source) : t_(text), line_(line), source_(source) {}

  std::vector<Token> run() {
    while (i_ < t_.size()) step();
    out_.push_back(Token{Tk::end, "", line_, {}});
    return std::move(out_);
  }

 private:
  std::string_view t_;
  std::size_t i_ = 0;
  std::int64_t line_;
  const std::string& source_;
  std::vector<Token> out_;
  std::vector<std::pair<std::string, bool>> heredocs_;  // delimiters awaiting their bodies; strip tabs
  bool command_start_ = true, in_cond_ = false, want_heredoc_word_ = false;
  bool heredoc_strip_ = false;
  bool in_array_ = false;

  [[noreturn]] void fail(std::int64_t line, const std::string& what) const {
    throw InputError(fmt::format("{}: line {}", source_, line), what, "a shell script bash can read");
  }

  void step() {
    const char c = t_[i_];
    if (is_blank(c)) {
      ++i_;
    } else if (c == '\\' && i_ + 1 < t_.size() && t_[i_ + 1] == '\n') {
      i_ += 2;
      ++line_;
    } else if (c == '#') {
      while (i_ < t_.size() && t_[i_] != '\n') ++i_;
    } else if (c == '\n') {
      ++i_;
      emit(Tk::newline, "\n", line_);
      ++line_;
      command_start_ = true;
      read_heredoc_bodies();
    } else if (c == '(' && command_start_ && !in_cond_ && i_ + 1 < t_.size() && t_[i_ + 1] == '(') {
      const std::int64_t at = line_;
      const std::size_t from = i_;
      skip_balanced();
      emit(Tk::arith, std::string(t_.substr(from + 2, i_ - from - 4)), at);
      command_start_ = false;
    } else if ((c == '<' || c == '>') && i_ + 1 < t_.size() && t_[i_ + 1] == '(') {
      const std::int64_t at = line_;
      const std::size_t from = i_++;
      skip_balanced();
      emit(Tk::word, std::string(t_.substr(from, i_ - from)), at);
    } else if (is_op_char(c)) {
      read_op();
    } else {
      read_word();
    }
  }

  void emit(Tk kind, std::string text, std::int64_t line) { out_.push_back(Token{kind, std::move(text), line, {}}); }

  void read_op() {
    static const char* const kOps[] = {";;&", "<<<", "<<-", "&>>", ";;", ";&", "&&", "||", "|&", ">>", "<<",
                                       ">&", "<&", "&>", ">|", ";", "&", "|", "(", ")", "<", ">"};
    for (const char* op : kOps) {
      const std::string_view o(op);
      if (t_.substr(i_, o.size()) != o) continue;
      i_ += o.size();
      if (in_cond_) {  // inside [[ ]] these are the test's own words
        emit(Tk::word, std::string(o), line_);
        return;
      }
      emit(Tk::op, std::string(o), line_);
      if (o == "<<" || o == "<<-") {
        want_heredoc_word_ = true;
        heredoc_strip_ = o == "<<-";
      }
      const bool redirect = o.find_first_of("<>") != std::string_view::npos;
      command_start_ = !redirect && o != ")";
      return;
    }
  }

  // Past a bracketed region at i_ ("((...))", "(...)", "{...}"), quotes and nesting respected.
  void skip_balanced() {
    const char open = t_[i_];
    const char close = open == '(' ? ')' : '}';
    const std::int64_t at = line_;
    int depth = 0;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '\\' && i_ + 1 < t_.size()) {
        if (t_[i_ + 1] == '\n') ++line_;
        i_ += 2;
        continue;
      }
      if (c == '\'' || c == '"' || c == '`') {
        skip_quoted();
        continue;
      }
      if (c == '\n') ++line_;
      if (c == open) ++depth;
      if (c == close && --depth == 0) {
        ++i_;
        return;
      }
      ++i_;
    }
    fail(at, fmt::format("an unclosed '{}'", open));
  }

  // Past a quoted region at i_, with $(...) and ${...} inside double quotes.
  void skip_quoted() {
    const char q = t_[i_++];
    const std::int64_t at = line_;
    while (i_ < t_.size() && t_[i_] != q) {
      if (t_[i_] == '\n') ++line_;
      if (q != '\'' && t_[i_] == '\\' && i_ + 1 < t_.size()) {
        if (t_[i_ + 1] == '\n') ++line_;
        i_ += 2;
      } else if (q == '"' && t_[i_] == '$' && i_ + 1 < t_.size() && (t_[i_ + 1] == '(' || t_[i_ + 1] == '{')) {
        ++i_;
        skip_balanced();
      } else {
        ++i_;
      }
    }
    if (i_ >= t_.size()) fail(at, fmt::format("an unclosed {} quote", q == '\'' ? "single" : q == '"' ? "double" : "back"));
    ++i_;
  }

  void read_word() {
    const std::size_t from = i_;
    const std::int64_t at = line_;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (is_blank(c) || c == '\n' || is_op_char(c)) break;
      if (c == '\\' && i_ + 1 < t_.size()) {
        if (t_[i_ + 1] == '\n') ++line_;
        i_ += 2;
      } else if (c == '\'' || c == '"' || c == '`') {
        skip_quoted();
      } else if (c == '$' && i_ + 1 < t_.size() && (t_[i_ + 1] == '(' || t_[i_ + 1] == '{')) {
        ++i_;
        skip_balanced();
      } else {
        ++i_;
      }
    }
    std::string w(t_.substr(from, i_ - from));
    if (want_heredoc_word_) {
      want_heredoc_word_ = false;
      std::string delim;
      for (const char c : w) {
        if (c != '\'' && c != '"' && c != '\\') delim += c;
      }
      heredocs_.emplace_back(delim, heredoc_strip_);
      emit(Tk::word, w, at);
      return;
    }
    if (!w.empty() && std::all_of(w.begin(), w.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); }) &&
        i_ < t_.size() && (t_[i_] == '<' || t_[i_] == '>')) {
      return;  // a file descriptor before a redirection
    }
    if (!in_array_ && array_start(w)) {
      read_array(std::move(w), at);
      return;
    }
    if (command_start_ && w == "[[") in_cond_ = true;
    if (w == "]]") in_cond_ = false;
    emit(Tk::word, w, at);
    // After `for`, `((` opens a C-style loop's header, as at a command's start.
    command_start_ = kCommandStarters.contains(w) || w == "for";
  }

  // NAME=( or NAME+=( : an array assignment follows.
  bool array_start(const std::string& w) const {
    if (i_ >= t_.size() || t_[i_] != '(' || w.size() < 2 || w.back() != '=' || !is_name_start(w[0])) return false;
    const std::size_t end = w.size() - (w[w.size() - 2] == '+' ? 2 : 1);
    return std::all_of(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(end), is_name_char);
  }

  void read_array(std::string head, std::int64_t at) {
    ++i_;  // the '('
    Token arr{Tk::array, std::move(head), at, {}};
    const bool was_cond = in_cond_;
    in_cond_ = false;
    in_array_ = true;
    while (true) {
      if (i_ >= t_.size()) fail(at, "an unclosed array '('");
      const char c = t_[i_];
      if (c == ')') {
        ++i_;
        break;
      }
      if (is_blank(c)) {
        ++i_;
      } else if (c == '\n') {
        ++i_;
        ++line_;
      } else if (c == '\\' && i_ + 1 < t_.size() && t_[i_ + 1] == '\n') {
        i_ += 2;
        ++line_;
      } else if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else {
        const std::size_t before = out_.size();
        if (is_op_char(c)) fail(line_, fmt::format("'{}' inside an array", c));
        read_word();
        if (out_.size() > before) {
          arr.elements.push_back(std::move(out_.back()));
          out_.pop_back();
        }
      }
    }
    in_cond_ = was_cond;
    in_array_ = false;
    out_.push_back(std::move(arr));
    command_start_ = false;
  }

  void read_heredoc_bodies() {
    for (const auto& [delim, strip] : heredocs_) {
      while (i_ < t_.size()) {
        std::size_t end = t_.find('\n', i_);
        if (end == std::string_view::npos) end = t_.size();
        std::string_view l = t_.substr(i_, end - i_);
        i_ = std::min(end + 1, t_.size());
        ++line_;
        if (strip) l.remove_prefix(std::min(l.find_first_not_of('\t'), l.size()));
        if (l == delim) break;
      }
    }
    heredocs_.clear();
  }
};

bool is_redirect(const Token& t) {
  return t.kind == Tk::op && t.text.find_first_of("<>") != std::string::npos;
}

class Parser {
 public:
  Parser(const std::vector<Token>& t, const std::string& source) : t_(t), source_(source) {}

  CommandList all() {
    CommandList l = list({});
    if (peek().kind != Tk::end) fail(peek(), fmt::format("an unexpected '{}'", peek().text));
    return l;
  }

 private:
  const std::vector<Token>& t_;
  std::size_t i_ = 0;
  const std::string& source_;
  int depth_ = 0;

  [[noreturn]] void fail(const Token& at, const std::string& what) const {
    throw InputError(fmt::format("{}: line {}", source_, at.line), what, "a shell script bash can read");
  }
  const Token& peek() const { return t_[std::min(i_, t_.size() - 1)]; }
  bool at_word(std::string_view w) const { return peek().kind == Tk::word && peek().text == w; }
  bool at_op(std::string_view o) const { return peek().kind == Tk::op && peek().text == o; }
  void expect_word(std::string_view w) {
    if (!at_word(w)) fail(peek(), fmt::format("'{}' where '{}' was expected", peek().text, w));
    ++i_;
  }
  void skip_newlines() {
    while (peek().kind == Tk::newline) ++i_;
  }

  CommandList list(const std::set<std::string, std::less<>>& stops) {
    CommandList out;
    while (true) {
      while (peek().kind == Tk::newline || at_op(";") || at_op("&")) ++i_;
      const Token& p = peek();
      if (p.kind == Tk::end || (p.kind == Tk::word && stops.contains(p.text)) || at_op(")") || at_op(";;") ||
          at_op(";&") || at_op(";;&")) {
        return out;
      }
      auto c = command();
      if (at_op("&&") || at_op("||") || at_op("|") || at_op("|&")) {
        c->next = at_op("&&") ? Command::Next::and_then : at_op("||") ? Command::Next::or_else : Command::Next::pipe;
        ++i_;
        skip_newlines();
      }
      out.push_back(std::move(c));
    }
  }

  std::shared_ptr<Command> command() {
    if (++depth_ > kMaxShellNesting) fail(peek(), fmt::format("commands nested deeper than {}", kMaxShellNesting));
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    auto c = std::make_shared<Command>();
    c->line = peek().line;
    if (at_word("!")) {
      ++i_;
      auto inner = command();
      inner->negate = !inner->negate;
      return inner;
    }
    if (at_word("if")) parse_if(*c);
    else if (at_word("case")) parse_case(*c);
    else if (at_word("for")) parse_for(*c);
    else if (at_word("while") || at_word("until")) parse_loop(*c);
    else if (at_word("{") || at_op("(")) parse_group(*c);
    else if (at_word("function") || (peek().kind == Tk::word && t_[i_ + 1].kind == Tk::op && t_[i_ + 1].text == "(" &&
                                     i_ + 2 < t_.size() && t_[i_ + 2].kind == Tk::op && t_[i_ + 2].text == ")")) {
      parse_function(*c);
    } else {
      parse_simple(*c);
    }
    while (is_redirect(peek())) skip_redirect();
    return c;
  }

  void skip_redirect() {
    ++i_;
    if (peek().kind == Tk::word) ++i_;
  }

  void parse_if(Command& c) {
    c.kind = Command::Kind::if_;
    ++i_;
    c.conditions.push_back(list({"then"}));
    expect_word("then");
    c.bodies.push_back(list({"elif", "else", "fi"}));
    while (at_word("elif")) {
      ++i_;
      c.conditions.push_back(list({"then"}));
      expect_word("then");
      c.bodies.push_back(list({"elif", "else", "fi"}));
    }
    if (at_word("else")) {
      ++i_;
      c.bodies.push_back(list({"fi"}));
    }
    expect_word("fi");
  }

  void parse_case(Command& c) {
    c.kind = Command::Kind::case_;
    ++i_;
    if (peek().kind != Tk::word) fail(peek(), "case without a word");
    c.words.push_back(peek());
    ++i_;
    skip_newlines();
    expect_word("in");
    skip_newlines();
    while (!at_word("esac")) {
      if (peek().kind == Tk::end) fail(peek(), "case without esac");
      if (at_op("(")) ++i_;
      std::vector<Token> pats;
      while (peek().kind == Tk::word) {
        pats.push_back(peek());
        ++i_;
        if (!at_op("|")) break;
        ++i_;
      }
      if (!at_op(")")) fail(peek(), "a case pattern without ')'");
      ++i_;
      c.patterns.push_back(std::move(pats));
      c.bodies.push_back(list({"esac"}));
      if (at_op(";;") || at_op(";&") || at_op(";;&")) ++i_;
      skip_newlines();
    }
    ++i_;
  }

  void parse_for(Command& c) {
    c.kind = Command::Kind::for_;
    ++i_;
    if (peek().kind == Tk::arith) {  // for ((init; test; step)): c.name stays empty
      c.words.push_back(t_[i_++]);
      while (at_op(";") || peek().kind == Tk::newline) ++i_;
      expect_word("do");
      c.bodies.push_back(list({"done"}));
      expect_word("done");
      return;
    }
    if (peek().kind != Tk::word) fail(peek(), "for without a variable");
    c.name = peek().text;
    ++i_;
    skip_newlines();
    if (at_word("in")) {
      ++i_;
      while (peek().kind == Tk::word) c.words.push_back(t_[i_++]);
    } else {
      c.words.push_back(Token{Tk::word, "\"$@\"", c.line, {}});
    }
    while (at_op(";") || peek().kind == Tk::newline) ++i_;
    expect_word("do");
    c.bodies.push_back(list({"done"}));
    expect_word("done");
  }

  void parse_loop(Command& c) {
    c.kind = Command::Kind::loop;
    c.name = peek().text;
    ++i_;
    c.conditions.push_back(list({"do"}));
    expect_word("do");
    c.bodies.push_back(list({"done"}));
    expect_word("done");
  }

  void parse_group(Command& c) {
    c.kind = Command::Kind::group;
    const bool brace = at_word("{");
    ++i_;
    c.bodies.push_back(list({"}"}));
    if (brace) expect_word("}");
    else if (at_op(")")) ++i_;
    else fail(peek(), "a '(' without ')'");
  }

  void parse_function(Command& c) {
    c.kind = Command::Kind::function;
    if (at_word("function")) ++i_;
    c.name = peek().text;
    ++i_;
    if (at_op("(")) i_ += 2;
    skip_newlines();
    CommandList body;
    body.push_back(command());
    c.bodies.push_back(std::move(body));
  }

  void parse_simple(Command& c) {
    while (true) {
      const Token& p = peek();
      if (p.kind == Tk::word || p.kind == Tk::array || p.kind == Tk::arith) {
        c.words.push_back(p);
        ++i_;
      } else if (is_redirect(p)) {
        skip_redirect();
      } else {
        break;
      }
    }
    if (c.words.empty()) fail(peek(), fmt::format("an unexpected '{}'", peek().text == "\n" ? "newline" : peek().text));
  }
};

}  // namespace

std::vector<Token> lex_shell(std::string_view text, std::int64_t first_line, const std::string& source) {
  return Lexer(text, first_line, source).run();
}

CommandList parse_shell(const std::vector<Token>& tokens, const std::string& source) {
  return Parser(tokens, source).all();
}

}  // namespace moemem::detail
