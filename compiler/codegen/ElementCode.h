// Writes the code that computes a kernel's stores for a chunk of consecutive values of
// one loop variable (8 columns of a GEMM epilogue, 8 elements of an elementwise kernel):
// element expressions become fp32 arithmetic, with the elementwise ops from the shared
// table; loads and stores whose index math proves 8 consecutive elements 16-byte
// aligned and contiguous move as one vector.
#pragma once

#include "compiler/codegen/KernelSpec.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tlc::codegen {

struct ChunkLoop {
  std::string variable;   // "c" or "e"
  std::string base;       // C expression of the chunk's first value (a multiple of `vector`)
  int vector = 8;         // values per chunk (8, or 1)
  int64_t extent = 0;     // the variable takes 0 .. extent - 1
  // Values of the other variables to check contiguity at, e.g. {"m", {0, 1, 127, 128}}.
  std::map<std::string, std::vector<int64_t>> samples;
  // C expression of an accumulator leaf for element `i` (a C expression) of the chunk.
  std::function<std::string(const ElementExpr &, const std::string &i)> accumulator;
};

// Argument names (in0.., out0..) and C element types, by parameter index.
struct ParamNames {
  std::vector<std::string> names, types;
};

class ElementCode {
public:
  ElementCode(std::string kernel, ParamNames params) : kernel_(std::move(kernel)), params_(std::move(params)) {}

  // The statements for one chunk (a C block indented by `indent`), reading the arguments
  // through `p.`.
  std::string chunk(const std::vector<Store> &stores, const ChunkLoop &loop, const std::string &indent);

  // The statements that set `out[i]` to `value` for the chunk's values (a GEMM prologue's
  // A elements, computed as they are loaded), `out` a float array the caller declares.
  std::string values(const ElementRef &value, const std::string &out, const ChunkLoop &loop, const std::string &indent);

  // Global definitions the chunks and ropeTable's callers use (RoPE frequency tables),
  // to put before the Spec.
  std::string globals() const { return globals_; }

  // The name of a device table of RoPE frequencies theta^(-2i / headDim), one (hi, lo)
  // float pair per pair i as tl_rope_cos_sin takes them, defined once in globals().
  std::string ropeTable(double theta, int64_t headDim);

  // Whether `offset` moves `loop.vector` consecutive, aligned elements for every chunk.
  static bool contiguous(const IndexExpr &offset, const ChunkLoop &loop);
  // Whether `index` takes one value over each chunk (a cache row's sequence and token).
  static bool constantOverChunks(const IndexExpr &index, const ChunkLoop &loop);

private:
  struct Into {
    ElementRef value;
    std::string array;
  };
  std::string code(const std::vector<Store> &stores, const Into &into, const ChunkLoop &loop, const std::string &indent);

  std::string kernel_;
  ParamNames params_;
  std::string globals_;
  std::map<std::pair<double, int64_t>, std::string> ropeTables_;
};

// C source of an index expression; widened to 64 bits where its values may not fit 32.
std::string indexCode(const IndexExpr &index);

// A float literal that reads back as the nearest float to `value` (1.0f, -tl_inf()).
std::string floatLiteral(double value);

} // namespace tlc::codegen
