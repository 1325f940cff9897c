#include "manifest/manifest.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "generator/emitter.hpp"
#include "manifest/layouts.hpp"

namespace ft::manifest {
namespace {

using nlohmann::json;

// ---- Encoding ---------------------------------------------------------------

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(); }

json encode_support(const SupportUnit& u) {
  json symbols = json::object();
  for (std::size_t i = 0; i < kSupportCount; ++i)
    if (!u.symbols[i].empty()) symbols[std::string(to_string(Support(i)))] = u.symbols[i];
  return {{"dtype", std::string(to_string(u.dtype))},
          {"code_object", u.code_object},
          {"source", u.source},
          {"toolchain", u.toolchain},
          {"symbols", std::move(symbols)}};
}

// The program's steps, each launch with the file of its code object.
json recorded_steps(const Bucket& b) {
  json steps = steps_json(b.program);
  for (json& st : steps)
    if (st["op"] == "launch") st["code_object"] = b.code_objects.at(st["symbol"].get<std::string>());
  return steps;
}

// A bucket's stages by role name: the forward's variants ("stage1", "stage2")
// or the backward's configurations ("dgrad2", ... "wgrad1").
json encode_stages(const LayerRecipe& r) {
  json stages = json::object();
  for (const Variant& v : r.stages) stages[std::string(op::moe_forward().stage(v.role)->name)] = v.to_json();
  for (const GradStage& g : r.grad) stages[std::string(to_string(g.role))] = g.kernel.to_json();
  return stages;
}

json encode_bucket(const Bucket& b) {
  json provenance{{"variant_id", b.provenance.variant_id}, {"run_id", b.provenance.run_id}, {"chosen_at", b.provenance.chosen_at}};
  if (const auto& run = b.provenance.run)
    provenance.update({{"flytune_version", run->flytune_version},
                       {"git_commit", run->git_commit},
                       {"templates_commit", run->templates_commit},
                       {"hostname", run->hostname}});
  json bucket{{"tokens", b.tokens},
              {"kernel_name", b.kernel_name},
              {"stages", encode_stages(b.recipe)},
              {"align_block", b.program.align_block},
              {"buffers_at_bucket", buffers_json(b.program)},
              {"steps", recorded_steps(b)},
              {"time_us", {{"median", b.time_us.median}, {"p10", optional_number(b.time_us.p10)}, {"p90", optional_number(b.time_us.p90)}}},
              {"provenance", std::move(provenance)}};
  if (b.recipe.grad.empty()) {  // what a host launching the forward without the runtime reads
    const StageContract c1 = b.recipe.stage(StageRole::stage1)->contract(), c2 = b.recipe.stage(StageRole::stage2)->contract();
    bucket.update({{"reduction", std::string(to_string(c2.output))},
                   {"weight_in_stage1", c1.weight_in_stage1},
                   {"weights", {{"w1", std::string(to_string(c1.weights))}, {"w2", std::string(to_string(c2.weights))}}}});
  }
  else bucket["kgrouped_args_bytes"] = b.kgrouped_args_bytes;  // the backward's wgrad kernels' struct
  if (b.speedup_vs_default) bucket["speedup_vs_default"] = *b.speedup_vs_default;
  return bucket;
}

json encode_problem(const Manifest& m, const ProblemEntry& p) {
  const SupportUnit* support = m.support_for(p.problem.dtype);
  json out{{"key", p.key},
           {"experts", p.problem.experts},
           {"hidden", p.problem.hidden},
           {"inter", p.problem.inter},
           {"topk", p.problem.topk},
           {"dtype", std::string(to_string(p.problem.dtype))},
           {"activation", p.activation},
           {"routing", p.routing},
           {"support_code_object", support ? support->code_object : std::string()},
           {"buckets", json::array()}};
  if (p.problem.fp8()) out.update(fp8_problem_json(p.problem, *m.target));
  for (const Bucket& b : p.buckets) out["buckets"].push_back(encode_bucket(b));
  out["missing_buckets"] = p.missing_buckets;
  if (!p.backward.empty()) {
    json& bw = out["backward"] = {{"operation", std::string(op::moe_backward().name)}, {"buckets", json::array()}};
    for (const Bucket& b : p.backward) bw["buckets"].push_back(encode_bucket(b));
  }
  return out;
}

// ---- Decoding ---------------------------------------------------------------
// nlohmann's at() / get() report a missing or mistyped member by exception;
// decode() turns any into one line.

int positive_int(const json& j, const char* key, const std::string& where) {
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > (1 << 30))
    throw std::invalid_argument(where + ": " + key + " " + v.dump() + " must be a positive integer");
  return v.get<int>();
}

Result<SupportUnit> decode_support(const json& s) {
  SupportUnit u;
  u.dtype = FT_TRY(parse_dtype(s.at("dtype").get<std::string>()));
  u.code_object = s.at("code_object").get<std::string>();
  u.source = s.value("source", std::string());
  u.toolchain = s.value("toolchain", std::string());
  const json& sym = s.at("symbols");
  std::string lacking;
  for (std::size_t i = 0; i < kSupportCount; ++i) {
    const SupportInfo& k = support_info(Support(i));
    const std::string key(k.name);
    if (k.presence == SupportPresence::always)
      u.symbols[i] = sym.at(key).get<std::string>();
    else
      u.symbols[i] = sym.value(key, std::string());
    if (k.presence == SupportPresence::fp8 && u.dtype == DType::e4m3 && u.symbols[i].empty())
      lacking += (lacking.empty() ? "" : ", ") + key;
  }
  if (!lacking.empty()) return fail(Errc::invalid_input, "the e4m3 support unit names no " + lacking + " symbol");
  return u;
}

// Without each launch step's code object: what the layer program computes.
json program_part(const json& steps) {
  json out = steps;
  for (json& s : out)
    if (s.is_object()) s.erase("code_object");
  return out;
}

// A bucket's recipe from its "stages": every role of its operation (a bucket is a whole program).
Status decode_stages(const json& stages, const op::Operation& op, LayerRecipe& r) {
  for (const op::Stage& st : op.stages) r.stages.push_back(FT_TRY(Variant::from_json(stages.at(std::string(st.name)))));
  for (const op::GradRole& g : op.grad)
    r.grad.push_back({g.launch, FT_TRY(BackwardVariant::from_json(stages.at(std::string(to_string(g.launch))), *r.target))});
  return {};
}

// The names of the kernels a bucket's steps launch from its own code objects
// (the support unit's are the manifest's support_units).
std::vector<std::string> stage_kernels(const Bucket& b) {
  std::vector<std::string> out;
  for (const Variant& v : b.recipe.stages)
    if (launches(b.program, v)) out.push_back(v.name());  // the one-launch layer launches its moe2 twin alone
  for (const GradStage& g : b.recipe.grad) out.push_back(g.kernel.name());
  return out;
}

Result<Bucket> decode_bucket(const json& bj, const Manifest& m, const ProblemEntry& p, const op::Operation& op) {
  Bucket b;
  const std::string where = "problem " + p.key + (op.grad.empty() ? "" : " backward") + " bucket";
  b.tokens = positive_int(bj, "tokens", where);
  const std::string at = where + " T=" + std::to_string(b.tokens);
  b.kernel_name = bj.value("kernel_name", std::string());
  b.recipe.target = m.target;
  b.recipe.problem = p.problem;
  const SupportUnit* support = m.support_for(p.problem.dtype);
  b.recipe.wide_align = support && support->wide_align();
  if (auto st = decode_stages(bj.at("stages"), op, b.recipe); !st) return std::unexpected(with_context(st.error(), at));
  const json& steps = bj.at("steps");
  for (const json& s : steps)
    if (s.at("op").get<std::string>() == "launch" && s.contains("code_object"))
      b.code_objects[s.at("symbol").get<std::string>()] = s.at("code_object").get<std::string>();
  // The recorded steps must be what the operation's program computes for this
  // recipe: an export written by another flytune version, or edited, is refused.
  auto prog = op.build(b.recipe, b.tokens);
  if (!prog) return std::unexpected(with_context(prog.error(), at));
  b.program = std::move(*prog);
  for (const std::string& kernel : stage_kernels(b))
    if (!b.code_objects.contains(kernel)) return fail(Errc::invalid_input, at + ": no step names the code object of " + kernel);
  const json computed = steps_json(b.program), recorded = program_part(steps);
  if (recorded != computed) {
    const json patch = json::diff(computed, recorded);
    return fail(Errc::invalid_input, at + ": the recorded steps differ from this runtime's " +
                                         (op.grad.empty() ? "layer program" : "backward program") + " (first difference: " +
                                         (patch.empty() ? std::string("none") : patch.front().dump()) +
                                         "); export again with this flytune version");
  }
  if (const json* t = bj.contains("time_us") ? &bj.at("time_us") : nullptr) {
    b.time_us.median = t->value("median", 0.0);
    if (t->contains("p10") && t->at("p10").is_number()) b.time_us.p10 = t->at("p10").get<double>();
    if (t->contains("p90") && t->at("p90").is_number()) b.time_us.p90 = t->at("p90").get<double>();
  }
  if (const json* pv = bj.contains("provenance") ? &bj.at("provenance") : nullptr) {
    b.provenance.variant_id = pv->value("variant_id", std::int64_t(0));
    b.provenance.run_id = pv->value("run_id", std::int64_t(0));
    b.provenance.chosen_at = pv->value("chosen_at", std::string());
    if (pv->contains("flytune_version"))
      b.provenance.run = Provenance::Run{pv->value("flytune_version", std::string()), pv->value("git_commit", std::string()),
                                         pv->value("templates_commit", std::string()), pv->value("hostname", std::string())};
  }
  if (bj.contains("speedup_vs_default")) b.speedup_vs_default = bj.at("speedup_vs_default").get<double>();
  if (!op.grad.empty()) b.kgrouped_args_bytes = bj.value("kgrouped_args_bytes", kKGroupedArgsBeforeC16);
  return b;
}

Result<ProblemEntry> decode_problem(const json& pj, const Manifest& m) {
  ProblemEntry p;
  p.key = pj.at("key").get<std::string>();
  const std::string where = "problem " + p.key;
  p.problem.name = p.key;
  p.problem.experts = positive_int(pj, "experts", where);
  p.problem.hidden = positive_int(pj, "hidden", where);
  p.problem.inter = positive_int(pj, "inter", where);
  p.problem.topk = positive_int(pj, "topk", where);
  const std::string dtype = pj.at("dtype").get<std::string>();
  p.problem.dtype = FT_TRY(parse_dtype(dtype));
  p.activation = pj.value("activation", std::string());
  p.routing = pj.value("routing", std::string());
  if (p.problem.fp8()) {
    if (!pj.contains("scales")) return fail(Errc::invalid_input, where + ": an fp8 problem names no scales");
    p.problem.scales = FT_TRY(parse_scales(pj.at("scales").get<std::string>()));
    if (auto st = p.problem.validate(); !st) return std::unexpected(with_context(st.error(), where));
  }
  if (p.problem.topk > p.problem.experts) return fail(Errc::invalid_input, where + ": topk exceeds experts");
  if (!m.support_for(p.problem.dtype)) return fail(Errc::invalid_input, where + ": no support unit for dtype " + dtype);
  for (const json& bj : pj.at("buckets")) p.buckets.push_back(FT_TRY(decode_bucket(bj, m, p, op::moe_forward())));
  if (p.buckets.empty()) return fail(Errc::invalid_input, where + " has no buckets");
  if (const json* bw = pj.contains("backward") ? &pj.at("backward") : nullptr) {
    if (bw->at("operation").get<std::string>() != op::moe_backward().name)
      return fail(Errc::invalid_input, where + ": backward operation '" + bw->at("operation").get<std::string>() + "' is not " +
                                           std::string(op::moe_backward().name));
    for (const json& bj : bw->at("buckets")) p.backward.push_back(FT_TRY(decode_bucket(bj, m, p, op::moe_backward())));
    if (p.backward.empty()) return fail(Errc::invalid_input, where + ": its backward has no buckets");
  }
  for (auto* list : {&p.buckets, &p.backward}) {
    std::sort(list->begin(), list->end(), [](const Bucket& a, const Bucket& b) { return a.tokens < b.tokens; });
    for (std::size_t i = 1; i < list->size(); ++i)
      if ((*list)[i].tokens == (*list)[i - 1].tokens)
        return fail(Errc::invalid_input, where + ": two " + (list == &p.backward ? "backward " : "") + "buckets of T=" +
                                             std::to_string((*list)[i].tokens));
  }
  for (const json& t : pj.value("missing_buckets", json::array())) {
    const int tokens = t.get<int>();
    if (tokens < 1) return fail(Errc::invalid_input, where + ": missing_buckets holds " + std::to_string(tokens) + " < 1");
    if (std::any_of(p.buckets.begin(), p.buckets.end(), [&](const Bucket& b) { return b.tokens == tokens; }))
      return fail(Errc::invalid_input, where + ": T=" + std::to_string(tokens) + " is both a bucket and a missing bucket");
    p.missing_buckets.push_back(tokens);
  }
  std::sort(p.missing_buckets.begin(), p.missing_buckets.end());
  return p;
}

Result<Manifest> decode_object(const json& j) {
  Manifest m;
  const int schema = j.at("schema_version").get<int>();
  if (schema != kSchemaVersion)
    return fail(Errc::invalid_input, fmt::format("manifest schema_version {}, this runtime reads {}; export again with this "
                                                 "flytune version", schema, kSchemaVersion));
  m.target = FT_TRY(lookup_target(j.at("target").get<std::string>()));
  m.code_object_format = j.at("code_object_format").get<std::string>();
  if (m.code_object_format != "cubin" && m.code_object_format != "hsaco" && m.code_object_format != "so")
    return fail(Errc::invalid_input, "unknown code_object_format '" + m.code_object_format + "'");
  m.exported_at = j.value("exported_at", std::string());
  m.source_database = j.value("source_database", std::string());
  if (const json* d = j.contains("device") ? &j.at("device") : nullptr)
    m.device = {d->value("runtime", std::string()),         d->value("name", std::string()),
                d->value("arch", std::string()),            d->value("compute_units", 0),
                d->value("memory_bytes", std::int64_t(0)),  d->value("driver_version", std::string()),
                d->value("runtime_version", std::string())};
  if (const json* t = j.contains("toolchain") ? &j.at("toolchain") : nullptr)
    m.toolchain = {t->value("backend", std::string()), t->value("version", std::string())};
  for (const json& s : j.at("support_units")) m.supports.push_back(FT_TRY(decode_support(s)));
  for (const json& pj : j.at("problems")) m.problems.push_back(FT_TRY(decode_problem(pj, m)));
  return m;
}

}  // namespace

std::size_t select_bucket(std::span<const int> buckets, int tokens) {
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), tokens);
  return it != buckets.end() ? std::size_t(it - buckets.begin()) : buckets.size() - 1;
}

SupportUnit SupportUnit::of(const Target& t, DType d, bool partials16, bool wide_align, bool saved) {
  SupportUnit u;
  u.dtype = d;
  for (std::size_t i = 0; i < kSupportCount; ++i) {
    const Support s = Support(i);
    switch (support_info(s).presence) {
      case SupportPresence::always: break;
      case SupportPresence::partials16: if (!partials16) continue; break;
      case SupportPresence::wide_align: if (!wide_align) continue; break;
      case SupportPresence::fp8: if (d != DType::e4m3) continue; break;  // every e4m3 unit has the quantise steps
      case SupportPresence::saved: if (!saved || d == DType::e4m3) continue; break;
    }
    u.symbols[i] = support_entry(s, t, d);
  }
  return u;
}

const Bucket& ProblemEntry::bucket_for(int tokens) const {
  std::vector<int> t;
  for (const Bucket& b : buckets) t.push_back(b.tokens);
  return buckets[select_bucket(t, tokens)];
}

const Bucket* ProblemEntry::backward_for(int tokens) const {
  if (backward.empty()) return nullptr;
  std::vector<int> t;
  for (const Bucket& b : backward) t.push_back(b.tokens);
  return &backward[select_bucket(t, tokens)];
}

const SupportUnit* Manifest::support_for(DType d) const {
  for (const SupportUnit& u : supports)
    if (u.dtype == d) return &u;
  return nullptr;
}

std::vector<std::string> Manifest::files() const {
  std::set<std::string> files;
  for (const SupportUnit& u : supports) files.insert(u.code_object);
  for (const ProblemEntry& p : problems)
    for (const auto* list : {&p.buckets, &p.backward})
      for (const Bucket& b : *list)
        for (const auto& [symbol, file] : b.code_objects) files.insert(file);
  return {files.begin(), files.end()};
}

json encode(const Manifest& m) {
  json supports = json::array(), problems = json::array();
  for (const SupportUnit& u : m.supports) supports.push_back(encode_support(u));
  for (const ProblemEntry& p : m.problems) problems.push_back(encode_problem(m, p));
  const MeasuredOn& d = m.device;
  return {{"schema_version", kSchemaVersion},
          {"target", m.target->name},
          {"vendor", std::string(to_string(m.target->vendor))},
          {"code_object_format", m.code_object_format},
          {"exported_at", m.exported_at},
          {"source_database", m.source_database},
          {"device",
           {{"runtime", d.runtime},
            {"name", d.name},
            {"arch", d.arch},
            {"compute_units", d.compute_units},
            {"memory_bytes", d.memory_bytes},
            {"driver_version", d.driver_version},
            {"runtime_version", d.runtime_version}}},
          {"toolchain", {{"backend", m.toolchain.backend}, {"version", m.toolchain.version}}},
          {"selection_rule", kSelectionRule},
          {"args", moe_args_layout()},
          {"shuffle", shuffle_layout()},
          {"routing_ids", "topk_ids in [0, experts) name an expert; -1 is an empty slot (it contributes nothing); "
                          "any other value is left out and counted into bad_ids"},
          {"weight_layouts", weight_layouts()},
          {"support_units", std::move(supports)},
          {"problems", std::move(problems)}};
}

Result<Manifest> decode(const json& j) {
  if (!j.is_object()) return fail(Errc::invalid_input, "manifest.json is not a JSON object");
  try {
    return decode_object(j);
  } catch (const std::exception& e) {
    return fail(Errc::invalid_input, std::string("manifest.json is malformed: ") + e.what());
  }
}

}  // namespace ft::manifest
