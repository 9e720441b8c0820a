// graph_rewrite: the one rewrite engine. Every pass of kiln is a named call to it with a rule table.
//
//   UOpPtr simplified = graph_rewrite(expr, pm_symbolic, nullptr, "symbolic");
//
// Bottom-up: a node's sources are rewritten before the node, then rules are applied to the node until
// none fires; whatever a rule returns is rewritten the same way. Results are memoized per call, so a
// shared subgraph is rewritten once. The result is a fixed point: no rule matches any of its nodes.
// A rule set that cycles (a -> b -> a) or grows without end throws kiln::InternalError naming the
// rules involved. With KILN_DEBUG >= 5 a named pass prints the graph it produced.
#pragma once
#include <string_view>
#include <unordered_map>

#include "uop/pattern.h"

namespace kiln {

UOpPtr graph_rewrite(const UOpPtr& root, const PatternMatcher& pm, RewriteContext* ctx = nullptr,
                     std::string_view pass_name = {});

// How many times rules fired in this thread's graph_rewrite calls (for tests of memoization).
size_t rewrite_rules_fired();

}  // namespace kiln

namespace kiln {

// root with every node that is a key of `replace` swapped for its value (one pass, no rules).
UOpPtr substitute(const UOpPtr& root, const std::unordered_map<const UOp*, UOpPtr>& replace);

}  // namespace kiln
