// Helpers shared by the reference's .cpp files: index arithmetic and argument checks. Not part of
// the reference's API.
#pragma once
#include <string>
#include <vector>

#include "reference/reference.h"
#include "uop/error.h"

namespace kiln::ref::detail {

std::string shape_str(const Shape& shape);  // "[2, 3]"

// kiln::cat under another name: inside kiln::ref, `cat` is the array concatenation.
template <typename... Args>
std::string message(const Args&... args) {
  return kiln::cat(args...);
}

// Throws std::invalid_argument with `what`; every user mistake in the reference goes through here.
[[noreturn]] void fail(const std::string& what);

int64_t numel_of(const Shape& shape);

// The multi-index of element `flat` of a row-major array of `shape`, and back.
Shape index_of(int64_t flat, const Shape& shape);
int64_t flat_of(const Shape& index, const Shape& shape);

// Flat position in an array of `shape` of the element that `out_index` reads when the array is
// broadcast to a (right-aligned, at least as long) output shape: size-1 dimensions read index 0.
int64_t broadcast_flat(const Shape& shape, const Shape& out_index);

// `axis` in [-rank, rank) made non-negative; `op` names the caller in the error.
int64_t normalize_axis(const char* op, int64_t axis, int64_t rank);

// One flag per axis: whether `axes` lists it. An empty list selects every axis; repeats throw.
std::vector<bool> axis_mask(const char* op, const Axes& axes, int64_t rank);

// An array of `shape` and `dtype` with every value 0.
Array zeros(const Shape& shape, DType dtype);

}  // namespace kiln::ref::detail
