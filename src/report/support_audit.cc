#include "report/support_audit.h"

#include "report/audit_case.h"

namespace kiln {

namespace {

Result<Tensor> dev(Backend& be, Shape shape, DType dtype) { return audit_tensor(be, shape, dtype); }

#define KILN_DEV(var, ...) KILN_AUDIT_TENSOR(var, __VA_ARGS__)

std::vector<AuditCase> cases() {
  std::vector<AuditCase> c;
  for (DType w : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32})
    for (DType x : {DType::kF32, DType::kBF16})
      for (int64_t m : {1, 9})
        c.push_back({"linear.matmul", [=](Backend& be) -> Result<AuditOutcome> {
                       KILN_DEV(xt, {m, 32}, x);
                       KILN_DEV(wt, {16, 32}, w);
                       KILN_DEV(yt, {m, 16}, DType::kF32);
                       return ask_and_run(MatmulArgs{xt, wt, yt}, [&](auto& r) { return be.linear().supports(r); },
                                          [&](auto& a) { return be.linear().matmul(a); });
                     }});
  for (NormKind kind : {NormKind::kOnePlus, NormKind::kPlain, NormKind::kGated})
    for (bool residual : {false, true})
      for (DType d : {DType::kF32, DType::kBF16})
        c.push_back({"norm.rms_norm", [=](Backend& be) -> Result<AuditOutcome> {
                       KILN_DEV(x, {4, 32}, d);
                       KILN_DEV(w, {32}, DType::kF32);
                       KILN_DEV(out, {4, 32}, d);
                       Tensor res, gate;
                       if (residual) {
                         KILN_ASSIGN_OR_RETURN(res, dev(be, {4, 32}, d));
                       }
                       if (kind == NormKind::kGated) {
                         KILN_ASSIGN_OR_RETURN(gate, dev(be, {4, 32}, d));
                       }
                       return ask_and_run(NormArgs{kind, x, res, w, gate, out, 1e-6f},
                                          [&](auto& r) { return be.norm().supports(r); },
                                          [&](auto& a) { return be.norm().rms_norm(a); });
                     }});
  for (int64_t rot : {8, 7})
    c.push_back({"attention.rope", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_DEV(q, {3, 4, 16}, DType::kF32);
                   KILN_DEV(k, {3, 2, 16}, DType::kF32);
                   KILN_DEV(pos, {3}, DType::kI32);
                   return ask_and_run(RopeArgs{q, k, pos, rot, 10000.f}, [&](auto& r) { return be.attention().supports(r); },
                                      [&](auto& a) { return be.attention().rope(a); });
                 }});
  auto layout = [](Backend& be, std::vector<int64_t> lens) { return audit_layout(be, lens); };
  for (DType kv : {DType::kF32, DType::kBF16})
    for (int64_t q_heads : {4, 3})
      for (bool decode : {false, true})
        c.push_back({"attention.write_kv+attend", [=](Backend& be) -> Result<AuditOutcome> {
                       std::vector<int64_t> lens = decode ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{5, 3};
                       KILN_ASSIGN_OR_RETURN(BatchLayout bl, layout(be, lens));
                       const int64_t T = bl.tokens;
                       KILN_DEV(kc, {4, 4, 2, 16}, kv);
                       KILN_DEV(vc, {4, 4, 2, 16}, kv);
                       KILN_DEV(k, {T, 2, 16}, DType::kF32);
                       KILN_DEV(v, {T, 2, 16}, DType::kF32);
                       auto w = ask_and_run(KvWriteArgs{k, v, kc, vc, bl.slot_mapping},
                                            [&](auto& r) { return be.attention().supports(r); },
                                            [&](auto& a) { return be.attention().write_kv(a); });
                       if (!w.ok() || w->first.runs_natively() != w->second.second.ok()) return w;
                       KILN_DEV(q, {T, q_heads, 16}, DType::kF32);
                       KILN_DEV(gate, {T, q_heads, 16}, DType::kF32);
                       KILN_DEV(out, {T, q_heads, 16}, DType::kF32);
                       return ask_and_run(AttentionArgs{q, gate, out, kc, vc, &bl, 0.25f},
                                          [&](auto& r) { return be.attention().supports(r); },
                                          [&](auto& a) { return be.attention().attend(a); });
                     }});
  for (int64_t kernel : {4, 1})
    c.push_back({"conv.causal_conv1d", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_ASSIGN_OR_RETURN(BatchLayout bl, layout(be, {5, 2}));
                   KILN_DEV(x, {7, 24}, DType::kF32);
                   KILN_DEV(w, {24, kernel}, DType::kF32);
                   KILN_DEV(state, {2, kernel > 1 ? kernel - 1 : 1, 24}, DType::kF32);
                   KILN_DEV(out, {7, 24}, DType::kF32);
                   return ask_and_run(ConvArgs{x, w, state, out, &bl}, [&](auto& r) { return be.conv().supports(r); },
                                      [&](auto& a) { return be.conv().causal_conv1d(a); });
                 }});
  for (GdnForm form : {GdnForm::kChunked, GdnForm::kRecurrent})
    for (DType state_dtype : {DType::kF32, DType::kBF16})
      for (int64_t k_heads : {2, 3})
        c.push_back({"gdn.delta_rule", [=](Backend& be) -> Result<AuditOutcome> {
                       KILN_ASSIGN_OR_RETURN(BatchLayout bl, layout(be, {5, 2}));
                       GdnArgs g;
                       g.form = form;
                       g.chunk = 4;
                       KILN_ASSIGN_OR_RETURN(g.q, dev(be, {7, k_heads, 8}, DType::kF32));
                       KILN_ASSIGN_OR_RETURN(g.k, dev(be, {7, k_heads, 8}, DType::kF32));
                       KILN_ASSIGN_OR_RETURN(g.v, dev(be, {7, 4, 8}, DType::kF32));
                       KILN_ASSIGN_OR_RETURN(g.a, dev(be, {7, 4}, DType::kF32));
                       KILN_ASSIGN_OR_RETURN(g.b, dev(be, {7, 4}, DType::kF32));
                       KILN_ASSIGN_OR_RETURN(g.a_log, dev(be, {4}, DType::kF32));
                       KILN_ASSIGN_OR_RETURN(g.dt_bias, dev(be, {4}, DType::kF32));
                       KILN_ASSIGN_OR_RETURN(g.state, dev(be, {2, 4, 8, 8}, state_dtype));
                       KILN_ASSIGN_OR_RETURN(g.out, dev(be, {7, 4, 8}, DType::kF32));
                       g.layout = &bl;
                       return ask_and_run(g, [&](auto& r) { return be.gdn().supports(r); },
                                          [&](auto& a) { return be.gdn().delta_rule(a); });
                     }});
  for (DType table : {DType::kBF16, DType::kF32, DType::kI32})
    c.push_back({"elementwise.embed", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_DEV(ids, {3}, DType::kI32);
                   KILN_DEV(t, {10, 8}, table);
                   KILN_DEV(out, {3, 8}, DType::kF32);
                   return ask_and_run(EmbedArgs{ids, t, out}, [&](auto& r) { return be.elementwise().supports(r); },
                                      [&](auto& a) { return be.elementwise().embed(a); });
                 }});
  for (const BinaryOpInfo& info : kBinaryOps)
    for (DType d : {DType::kF32, DType::kBF16})
      c.push_back({"elementwise.binary", [=](Backend& be) -> Result<AuditOutcome> {
                     KILN_DEV(a, {3, 8}, d);
                     KILN_DEV(b, {3, 8}, d);
                     KILN_DEV(out, {3, 8}, d);
                     return ask_and_run(BinaryArgs{info.op, a, b, out}, [&](auto& r) { return be.elementwise().supports(r); },
                                        [&](auto& x) { return be.elementwise().binary(x); });
                   }});
  c.push_back({"sampling.argmax", [](Backend& be) -> Result<AuditOutcome> {
                 KILN_DEV(logits, {2, 50}, DType::kF32);
                 KILN_DEV(ids, {2}, DType::kI32);
                 return ask_and_run(ArgmaxArgs{logits, ids}, [&](auto& r) { return be.sampling().supports(r); },
                                    [&](auto& a) { return be.sampling().argmax(a); });
               }});
  for (AuditCase& t : training_audit_cases()) c.push_back(std::move(t));
  return c;
}

}  // namespace

Result<BatchLayout> audit_layout(Backend& be, const std::vector<int64_t>& lens) {
  HostBatchLayout h;
  h.block_size = 4;
  int32_t next = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    std::vector<int32_t> blocks;
    for (int64_t b = 0; b < (lens[r] + 3) / 4; ++b) blocks.push_back(next++);
    h.add_row(0, lens[r], blocks, static_cast<int32_t>(r));
  }
  return make_batch_layout(h, be.storage());
}

std::vector<AuditRow> audit_support(Backend& backend) {
  std::vector<AuditRow> rows;
  for (const AuditCase& c : cases()) {
    AuditRow row;
    row.facet = c.facet;
    auto r = c.run(backend);
    if (!r.ok()) {
      row.mismatch = true;
      row.problem = "the audit case could not be set up: " + r.status().to_string();
      rows.push_back(std::move(row));
      continue;
    }
    row.support = r->first;
    row.request = r->second.first;
    row.outcome = r->second.second;
    const bool says_yes = row.support.runs_natively();
    if (says_yes && !row.outcome.ok()) {
      row.mismatch = true;
      row.problem = "predicate says " + std::string(support_state_name(row.support.state)) + " but the method failed: " +
                    row.outcome.to_string();
    } else if (!says_yes && row.outcome.ok()) {
      row.mismatch = true;
      row.problem = "predicate says " + std::string(support_state_name(row.support.state)) + " but the method ran";
    } else if (!says_yes && row.outcome.code() != ErrorCode::kUnsupported) {
      row.mismatch = true;
      row.problem = "a declined request must fail with kUnsupported, got " + row.outcome.to_string();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

int count_mismatches(const std::vector<AuditRow>& rows) {
  int n = 0;
  for (const auto& r : rows) n += r.mismatch;
  return n;
}

}  // namespace kiln
