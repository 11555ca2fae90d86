// CHECK / CHECK_EQ / ... / LOG as the course's student files use them (dmlc-core's logging, as MXNet 1.x shipped it),
// written for this project. A failed check or LOG(FATAL) throws dmlc::Error whose message is ONE line:
//   new-forward.cuh:57: Check failed: 0 == 1 (0 vs. 1): Remove this line and replace with your implementation
// so an unstarted student sees the skeleton's own sentence, and pybind11 hands it to Python as a RuntimeError.
//
// Macro hygiene: these macros expand inside the student's file, after the student may have defined macros named
// M, C, H, W, K, B, x, y, min, tx, ... Their bodies therefore use only the macro arguments and long, prefixed
// names (pyconv_...), never short identifiers.
#ifndef DMLC_LOGGING_H_
#define DMLC_LOGGING_H_
#if defined(__GNUC__)
#pragma GCC system_header  // the framework's headers never warned in a student's build; neither do these
#endif

#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dmlc {

// What MXNet threw for a failed CHECK; a std::runtime_error, so pybind11 turns it into RuntimeError.
struct Error : public std::runtime_error {
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace logging_detail {

inline const char* file_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

// "file:line: head[: message]" with newlines folded into spaces: a student's `<< std::endl` must not split it.
inline std::string one_line(const char* file, int line, const std::string& head, const std::string& message) {
  std::string text = std::string(file_name(file)) + ":" + std::to_string(line) + ": " + head;
  std::string msg = message;
  for (char& ch : msg)
    if (ch == '\n' || ch == '\r') ch = ' ';
  while (!msg.empty() && msg.back() == ' ') msg.pop_back();
  if (!msg.empty()) text += (head.empty() ? "" : ": ") + msg;
  return text;
}

// Collects the streamed message; the destructor (end of the CHECK's full expression) throws.
class FatalMessage {
 public:
  FatalMessage(const char* file, int line, std::string head) : file_(file), line_(line), head_(std::move(head)) {}
  std::ostream& stream() { return message_; }
  ~FatalMessage() noexcept(false) {
    // A `<<` operand that threw is already unwinding: a second exception would terminate the process.
    if (std::uncaught_exceptions() > uncaught_) return;
    throw Error(one_line(file_, line_, head_, message_.str()));
  }

 private:
  const char* file_;
  int line_;
  std::string head_;
  std::ostringstream message_;
  int uncaught_ = std::uncaught_exceptions();
};

// LOG(INFO / WARNING / ERROR): one line on stderr, as MXNet's logging printed it.
class LogMessage {
 public:
  LogMessage(const char* file, int line, const char* severity) : file_(file), line_(line), severity_(severity) {}
  std::ostream& stream() { return message_; }
  ~LogMessage() { std::cerr << one_line(file_, line_, severity_, message_.str()) << std::endl; }

 private:
  const char* file_;
  int line_;
  const char* severity_;
  std::ostringstream message_;
};

// Turns `cond ? (void)0 : Voidify() & stream << ...` into one expression of type void.
struct Voidify {
  void operator&(std::ostream&) {}
};

// CHECK_xx(a, b): nullptr when the relation holds, else "a op b (va vs. vb)".
#define PYCONV_DMLC_DEFINE_CHECK(name, op)                                                              \
  template <typename PyconvA, typename PyconvB>                                                         \
  inline std::unique_ptr<std::string> check_##name(const PyconvA& a, const PyconvB& b, const char* text) { \
    if (a op b) return nullptr;                                                                         \
    std::ostringstream os;                                                                              \
    os << text << " (" << a << " vs. " << b << ")";                                                     \
    return std::unique_ptr<std::string>(new std::string(os.str()));                                     \
  }
PYCONV_DMLC_DEFINE_CHECK(eq, ==)
PYCONV_DMLC_DEFINE_CHECK(ne, !=)
PYCONV_DMLC_DEFINE_CHECK(lt, <)
PYCONV_DMLC_DEFINE_CHECK(le, <=)
PYCONV_DMLC_DEFINE_CHECK(gt, >)
PYCONV_DMLC_DEFINE_CHECK(ge, >=)
#undef PYCONV_DMLC_DEFINE_CHECK

template <typename PyconvT>
inline PyconvT check_not_null(const char* file, int line, const char* text, PyconvT&& value) {
  if (value == nullptr) FatalMessage(file, line, std::string("Check failed: '") + text + "' must be non NULL");
  return std::forward<PyconvT>(value);
}

}  // namespace logging_detail
}  // namespace dmlc

#define CHECK(pyconv_cond)                                                                       \
  (pyconv_cond) ? (void)0                                                                        \
                : ::dmlc::logging_detail::Voidify() &                                            \
                      ::dmlc::logging_detail::FatalMessage(__FILE__, __LINE__, "Check failed: " #pyconv_cond).stream()

// `while` (not `if`) so that `if (c) CHECK_EQ(a, b) << "m"; else ...` keeps its else; the body throws, so it never loops.
#define PYCONV_DMLC_CHECK_OP(name, op, pyconv_a, pyconv_b)                                                      \
  while (auto pyconv_check_failure_ =                                                                           \
             ::dmlc::logging_detail::check_##name((pyconv_a), (pyconv_b), #pyconv_a " " #op " " #pyconv_b))     \
  ::dmlc::logging_detail::FatalMessage(__FILE__, __LINE__, "Check failed: " + *pyconv_check_failure_).stream()

#define CHECK_EQ(pyconv_a, pyconv_b) PYCONV_DMLC_CHECK_OP(eq, ==, pyconv_a, pyconv_b)
#define CHECK_NE(pyconv_a, pyconv_b) PYCONV_DMLC_CHECK_OP(ne, !=, pyconv_a, pyconv_b)
#define CHECK_LT(pyconv_a, pyconv_b) PYCONV_DMLC_CHECK_OP(lt, <, pyconv_a, pyconv_b)
#define CHECK_LE(pyconv_a, pyconv_b) PYCONV_DMLC_CHECK_OP(le, <=, pyconv_a, pyconv_b)
#define CHECK_GT(pyconv_a, pyconv_b) PYCONV_DMLC_CHECK_OP(gt, >, pyconv_a, pyconv_b)
#define CHECK_GE(pyconv_a, pyconv_b) PYCONV_DMLC_CHECK_OP(ge, >=, pyconv_a, pyconv_b)
#define CHECK_NOTNULL(pyconv_x) ::dmlc::logging_detail::check_not_null(__FILE__, __LINE__, #pyconv_x, (pyconv_x))

// MXNet's release builds compiled the D-variants out; they still have to compile.
#define DCHECK(pyconv_cond) while (false) CHECK(pyconv_cond)
#define DCHECK_EQ(pyconv_a, pyconv_b) while (false) CHECK_EQ(pyconv_a, pyconv_b)
#define DCHECK_NE(pyconv_a, pyconv_b) while (false) CHECK_NE(pyconv_a, pyconv_b)
#define DCHECK_LT(pyconv_a, pyconv_b) while (false) CHECK_LT(pyconv_a, pyconv_b)
#define DCHECK_LE(pyconv_a, pyconv_b) while (false) CHECK_LE(pyconv_a, pyconv_b)
#define DCHECK_GT(pyconv_a, pyconv_b) while (false) CHECK_GT(pyconv_a, pyconv_b)
#define DCHECK_GE(pyconv_a, pyconv_b) while (false) CHECK_GE(pyconv_a, pyconv_b)

#define LOG(severity) PYCONV_DMLC_LOG_##severity
#define PYCONV_DMLC_LOG_INFO ::dmlc::logging_detail::LogMessage(__FILE__, __LINE__, "INFO").stream()
#define PYCONV_DMLC_LOG_WARNING ::dmlc::logging_detail::LogMessage(__FILE__, __LINE__, "WARNING").stream()
#define PYCONV_DMLC_LOG_ERROR ::dmlc::logging_detail::LogMessage(__FILE__, __LINE__, "ERROR").stream()
#define PYCONV_DMLC_LOG_FATAL ::dmlc::logging_detail::FatalMessage(__FILE__, __LINE__, "").stream()
#define PYCONV_DMLC_LOG_DFATAL PYCONV_DMLC_LOG_FATAL
#define LOG_IF(severity, pyconv_cond) \
  !(pyconv_cond) ? (void)0 : ::dmlc::logging_detail::Voidify() & LOG(severity)
#define DLOG(severity) while (false) LOG(severity)

#endif  // DMLC_LOGGING_H_
