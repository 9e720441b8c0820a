// libFuzzer target: the input gzipped, then read as an IDX file: the fuzzer mutates the IDX header
// and data while every input goes through the gzip path (growth bounded by what the header promises).
#include <zlib.h>

#include "frontend/data.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> gz(compressBound(static_cast<uLong>(size)) + 32);
  z_stream zs{};
  if (deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return 0;
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = gz.data();
  zs.avail_out = static_cast<uInt>(gz.size());
  int rc = deflate(&zs, Z_FINISH);
  gz.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return 0;
  return kiln::fuzz::expect_errors([&] { kiln::parse_idx(std::move(gz), "fuzz input (gzipped)"); });
}
