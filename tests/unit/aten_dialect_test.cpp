// The ATen table (backends/aten): its schemas parse as native_functions.yaml writes them, every
// call a rule makes names its schema's arguments, and ExecuTorch has an out variant of every
// functional overload it may be given. And the backends' rule tables refuse a second rule.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "backends/aten/dialect.h"
#include "backends/aten/schema.h"
#include "backends/rule_table.h"
#include "core/error.h"
#ifdef HFX_HAVE_EXECUTORCH
#include "backends/executorch/out_variants.h"
#endif

namespace hfx {
namespace {

TEST(AtenSchema, ParsesNamesDefaultsKeywordsAndOuts) {
  const AtenSchema s = parse_aten_schema("slice_copy.Tensor_out(Tensor self, int dim=0, SymInt? start=None, "
                                         "SymInt step=1, *, str approximate='none', Tensor(a!) out)");
  EXPECT_EQ(s.op, "slice_copy");
  EXPECT_EQ(s.overload, "Tensor_out");
  ASSERT_EQ(s.args.size(), 6u);
  EXPECT_EQ(s.args[1].type, "int");
  EXPECT_EQ(s.args[1].name, "dim");
  EXPECT_EQ(s.args[1].default_value, "0");
  EXPECT_EQ(s.args[2].type, "SymInt?");
  EXPECT_FALSE(s.args[3].keyword);
  EXPECT_TRUE(s.args[4].keyword);
  EXPECT_EQ(s.args[4].default_value, "'none'");
  EXPECT_TRUE(s.args[5].out);
  EXPECT_TRUE(s.is_out_variant());
  EXPECT_EQ(parse_aten_schema("maximum(Tensor self, Tensor other)").qualified(), "maximum.default");
}

TEST(AtenSchema, TensorOptionsAreTheOutTensors) {
  const AtenSchema& arange = aten_schema("arange.start_step");
  EXPECT_TRUE(arange.arg("dtype")->tensor_option());
  EXPECT_TRUE(arange.arg("pin_memory")->tensor_option());
  EXPECT_FALSE(arange.arg("step")->tensor_option());
}

TEST(AtenCall, ArgumentsAreTheSchemasInItsOrder) {
  const AtenCall ok = aten_call("div.Tensor_mode", {{"self", aten_none()}, {"other", aten_none()},
                                                   {"rounding_mode", aten_string("trunc")}});
  EXPECT_EQ(ok.arg("rounding_mode")->text, "trunc");
  EXPECT_EQ(ok.arg("out"), nullptr);
  // An argument without a default is required; ones with defaults may be left out.
  EXPECT_THROW(aten_call("div.Tensor_mode", {{"self", aten_none()}, {"rounding_mode", aten_string("trunc")}}), Error);
  EXPECT_NO_THROW(aten_call("add.Tensor", {{"self", aten_none()}, {"other", aten_none()}}));
  EXPECT_THROW(aten_call("div.Tensor", {{"divisor", aten_none()}}), Error);
  EXPECT_THROW(aten_call("where.self", {{"self", aten_none()}, {"condition", aten_none()}}), Error);
  EXPECT_THROW(aten_schema("no_such_op.default"), Error);
}

#ifdef HFX_HAVE_EXECUTORCH
// The functional overloads ExecuTorch lowers itself (MatMul as bmm, Reshape as a view) or never
// keeps (SiLU, Softplus: decomposed); every other has its kernel.
TEST(AtenOutVariants, EveryFunctionalOverloadHasOne) {
  const std::set<std::string> own = {"matmul.default", "reshape.default", "silu.default", "softplus.default"};
  for (const AtenSchema* s : aten_schemas()) {
    if (s->is_out_variant() || own.count(s->qualified())) continue;
    const EtOutVariant& v = et_out_variant(s->qualified());
    EXPECT_TRUE(v.kernel->is_out_variant()) << s->qualified();
    for (const AtenSchemaArg& a : s->args)  // a required argument the kernel lacks is its out tensor's
      EXPECT_TRUE(v.kernel->arg(a.name) || a.tensor_option() || a.has_default()) << s->qualified() << " " << a.name;
  }
  EXPECT_THROW(et_out_variant("matmul.default"), Error);
}
#endif

TEST(OpRuleTable, RefusesASecondRule) {
  OpRuleTable<int> table("test");
  EXPECT_EQ(table.find(OpKind::Add), nullptr);
  EXPECT_EQ(table.get(OpKind::Add), 0);
  EXPECT_TRUE(table.add(OpKind::Add, 7));
  EXPECT_EQ(table.get(OpKind::Add), 7);
  EXPECT_THROW(table.add(OpKind::Add, 8), Error);
}

}  // namespace
}  // namespace hfx
