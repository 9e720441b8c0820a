// Catch2's main for kiln_torch_tests, kept apart from the ATen-heavy test files.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
