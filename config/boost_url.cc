// The one translation unit that compiles Boost.URL (header-only use in Debian).
#include <boost/url/src.hpp>
