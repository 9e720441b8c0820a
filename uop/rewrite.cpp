#include "uop/rewrite.h"

#include <iostream>
#include <unordered_map>
#include <unordered_set>

#include "uop/config.h"

namespace kiln {

namespace {

thread_local size_t g_rules_fired = 0;

// A chain of replacements this long without reaching a fixed point is a rule set that grows forever.
constexpr size_t kMaxReplacementDepth = 20000;
// Pre-order nests a node's rewrite inside its parent's, so a chain of legitimately replaced nodes nests
// as deep as the graph (--x -> x down a 100,000-node chain): the bound is the graph depth kiln could
// hold, not the length of one rule chain.
constexpr size_t kMaxPreOrderDepth = size_t{1} << 20;

// How a Rewriter visits: sources first (rules see rebuilt nodes, to a fixed point), a node first (rules
// see it as found; a replacement is visited the same way), or a node first with replacements taken as
// they are (substitute).
enum class Mode { BottomUp, PreOrder, Substitute };

// An explicit stack instead of recursion: lowered kernels make graphs deep enough to overflow it.
struct Frame {
  UOpPtr node;
  enum Stage { Visit, Rebuild, Finish } stage;
  UOpPtr replacement = nullptr;  // Finish: the node a rule returned, being rewritten
  const Rule* rule = nullptr;  // Finish: the rule that returned it
};

class Rewriter {
 public:
  Rewriter(const PatternMatcher& pm, RewriteContext* ctx, std::string_view name, Mode mode)
      : pm_(pm), ctx_(ctx), name_(name), mode_(mode) {}

  UOpPtr run(const UOpPtr& root) {
    stack_.push_back(Frame{root, Frame::Visit});
    while (!stack_.empty()) {
      Frame frame = std::move(stack_.back());
      stack_.pop_back();
      switch (frame.stage) {
        case Frame::Visit: visit(std::move(frame)); break;
        case Frame::Rebuild: rebuild(std::move(frame)); break;
        case Frame::Finish: finish(std::move(frame)); break;
      }
    }
    return memo_.at(root.get()).second;
  }

 private:
  void visit(Frame frame) {
    const UOp* key = frame.node.get();
    if (memo_.count(key)) return;
    if (in_progress_.count(key)) throw_loop(frame.node);
    if (mode_ != Mode::BottomUp)
      if (std::optional<PatternMatcher::Fired> fired = pm_.rewrite(frame.node, ctx_)) {
        if (mode_ == Mode::Substitute) return set(frame.node, fired->replacement);
        in_progress_.insert(key);
        return replace(frame.node, *fired, kMaxPreOrderDepth);
      }
    in_progress_.insert(key);
    stack_.push_back(Frame{frame.node, Frame::Rebuild});
    for (auto it = frame.node->src.rbegin(); it != frame.node->src.rend(); ++it)
      if (!memo_.count(it->get())) stack_.push_back(Frame{*it, Frame::Visit});
  }

  void rebuild(Frame frame) {
    const UOpPtr& node = frame.node;
    std::vector<UOpPtr> new_src;
    new_src.reserve(node->src.size());
    bool changed = false;
    for (const UOpPtr& s : node->src) {
      new_src.push_back(memo_.at(s.get()).second);
      changed |= new_src.back() != s;
    }
    UOpPtr current = changed ? node->with_src(std::move(new_src)) : node;
    if (mode_ != Mode::BottomUp) return set(node, current);  // rules saw the node before its sources
    if (current != node) {
      if (auto done = memo_.find(current.get()); done != memo_.end()) return set(node, done->second.second);
      in_progress_.insert(current.get());
    }
    std::optional<PatternMatcher::Fired> fired = pm_.rewrite(current, ctx_);
    if (!fired) {
      if (current != node) set(current, current);
      return set(node, current);
    }
    replace(node, *fired, kMaxReplacementDepth, current);
  }

  // node (or `current`, its rebuilt copy) becomes whatever the rule's replacement rewrites to.
  void replace(const UOpPtr& node, const PatternMatcher::Fired& fired, size_t max_depth, const UOpPtr& current = nullptr) {
    ++g_rules_fired;
    if (++depth_ > max_depth) throw_runaway(*fired.rule, max_depth);
    chain_.push_back({current ? current : node, fired.rule});
    stack_.push_back({node, Frame::Finish, fired.replacement, fired.rule});
    stack_.push_back(Frame{fired.replacement, Frame::Visit});
  }

  void finish(Frame frame) {
    --depth_;
    const UOpPtr& chained = chain_.back().first;
    UOpPtr result = memo_.at(frame.replacement.get()).second;
    if (chained != frame.node) set(chained, result);
    chain_.pop_back();
    set(frame.node, result);
  }

  void set(const UOpPtr& node, const UOpPtr& result) {
    in_progress_.erase(node.get());
    memo_[node.get()] = {node, result};  // the key is kept alive so its address is never reused
  }

  [[noreturn]] void throw_loop(const UOpPtr& again) {
    std::string rules;
    bool in_cycle = false;
    for (const auto& [node, rule] : chain_) {
      in_cycle |= node == again;
      if (in_cycle) rules += cat("\n  ", rule->describe(), " rewrote ", str(node));
    }
    if (rules.empty())  // the node re-entered through a rebuilt copy: show the innermost rules
      for (size_t i = chain_.size() > 8 ? chain_.size() - 8 : 0; i < chain_.size(); ++i)
        rules += cat("\n  ", chain_[i].second->describe(), " rewrote ", str(chain_[i].first));
    throw InternalError(cat("graph_rewrite", name_.empty() ? "" : cat(" (", name_, ")"),
                            ": rules loop: rewriting reached ", str(again), " again while still rewriting it.",
                            rules.empty() ? "" : " The rules in the cycle:", rules,
                            "\nFix the rule so that its result no longer matches the pattern that produced it."));
  }

  [[noreturn]] void throw_runaway(const Rule& last, size_t max_depth) {
    throw InternalError(cat("graph_rewrite", name_.empty() ? "" : cat(" (", name_, ")"),
                            ": no fixed point after ", max_depth, " nested rewrites; the last rule was ",
                            last.describe(), ". A rule keeps producing new nodes that match again."));
  }

  const PatternMatcher& pm_;
  RewriteContext* ctx_;
  std::string_view name_;
  Mode mode_;
  std::vector<Frame> stack_;
  std::unordered_map<const UOp*, std::pair<UOpPtr, UOpPtr>> memo_;
  std::unordered_set<const UOp*> in_progress_;
  std::vector<std::pair<UOpPtr, const Rule*>> chain_;  // the replacements waiting on their results
  size_t depth_ = 0;
};

}  // namespace

UOpPtr graph_rewrite(const UOpPtr& root, const PatternMatcher& pm, RewriteContext* ctx, std::string_view pass_name,
                     RewriteOrder order) {
  UOpPtr out = Rewriter(pm, ctx, pass_name, order == RewriteOrder::PreOrder ? Mode::PreOrder : Mode::BottomUp).run(root);
  if (!pass_name.empty() && config().debug >= 5) std::cerr << "--- after " << pass_name << "\n" << print_graph(out);
  return out;
}

size_t rewrite_rules_fired() { return g_rules_fired; }

namespace {
struct SubstituteContext : RewriteContext {
  const std::unordered_map<const UOp*, UOpPtr>* replace;
};
}  // namespace

UOpPtr substitute(const UOpPtr& root, const std::unordered_map<const UOp*, UOpPtr>& replace) {
  static const PatternMatcher pm_substitute{{UPat::any(), [](const Match& m) {
    const auto& table = *m.context<SubstituteContext>().replace;
    auto it = table.find(m.root.get());
    return it == table.end() ? nullptr : it->second;
  }}};
  SubstituteContext ctx;
  ctx.replace = &replace;
  return Rewriter(pm_substitute, &ctx, "substitute", Mode::Substitute).run(root);
}

}  // namespace kiln
