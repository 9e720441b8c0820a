// [spirv] tests (being written).
#include <catch2/catch.hpp>
