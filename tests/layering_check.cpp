// Compiled with exactly the include paths of kiln_uop: it must see its own folder and nothing above.
// If this file stops compiling, the include-path layering in CMakeLists.txt (kiln_library) broke.
#if !__has_include("uop/ops.def")
#error "uop/ must see itself"
#endif
#if __has_include("schedule/CMakeLists.txt") || __has_include("frontend/CMakeLists.txt") || \
    __has_include("devices/CMakeLists.txt") || __has_include("lower/CMakeLists.txt")
#error "uop/ sees a folder above it: the include-path layering is broken"
#endif
