// The web build's copy of fmt's compiled part (web/CMakeLists.txt): Debian ships libfmt built for
// the host only, so its non-template functions (fmt/format-inl.h) are compiled here once, with the
// explicit instantiations fmt/format.h declares `extern template`; every other source uses fmt's
// headers as the native build does, instead of FMT_HEADER_ONLY's copy in each.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
