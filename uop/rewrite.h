// graph_rewrite: the one rewrite engine. Every pass of kiln is a named call to it with a rule table.
//
//   UOpPtr simplified = graph_rewrite(expr, pm_symbolic, nullptr, "symbolic");
//   UOpPtr expanded = graph_rewrite(sink, pm_expand, &ctx, "expand", RewriteOrder::PreOrder);
//
// Bottom-up (the default): a node's sources are rewritten before the node, then rules are applied to
// the node until none fires; whatever a rule returns is rewritten the same way. The result is a fixed
// point: no rule matches any of its nodes.
// Pre-order: rules are tried on a node as it is found, before its sources are visited, so a rule sees
// the node the caller built (a key whose sources another rule would change still matches). A rule's
// replacement is visited the same way (rules tried on it, then its sources); a node no rule matched
// has its sources visited and is rebuilt over them, without being offered to the rules again. A
// replacement that reaches a node still being rewritten (x -> f(x)) is a loop; nesting deeper than
// 2^20 replacements is a rule set that grows forever. Both throw.
// Results are memoized per call, so a shared subgraph is rewritten once. A rule set that cycles
// (a -> b -> a) or grows without end throws kiln::InternalError naming the rules involved. With
// KILN_DEBUG >= 5 a named pass prints the graph it produced.
#pragma once
#include <string_view>
#include <unordered_map>

#include "uop/pattern.h"

namespace kiln {

enum class RewriteOrder { BottomUp, PreOrder };

UOpPtr graph_rewrite(const UOpPtr& root, const PatternMatcher& pm, RewriteContext* ctx = nullptr,
                     std::string_view pass_name = {}, RewriteOrder order = RewriteOrder::BottomUp);

// How many times rules fired in this thread's graph_rewrite calls (for tests of memoization).
size_t rewrite_rules_fired();

// root with every node that is a key of `replace` swapped for its value. Keys are matched as found in
// root, before their sources are visited (so a key whose sources contain other keys still matches),
// and values are taken as they are: r -> r+1 and a renaming r1 -> r2, r2 -> r1 each take one call.
UOpPtr substitute(const UOpPtr& root, const std::unordered_map<const UOp*, UOpPtr>& replace);

}  // namespace kiln
