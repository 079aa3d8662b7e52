/* msgpack-c's unpack template (msgpack/unpack_template.h), instantiated by
 * the file including this after defining its msgpack_unpack_* names and
 * callbacks (lib/codec/msgpack_bounded.c, lib/codec/stream_msgpack.c). The template is
 * not clean under kvix's warnings: they are silenced for it alone. No
 * include guard: each includer instantiates its own. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wundef"
#include <msgpack/unpack_template.h>
#pragma GCC diagnostic pop
