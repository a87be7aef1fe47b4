// A Backend that forwards every facet and fact to another backend: tests derive from it and
// override the one thing they change (a lying predicate, other capabilities, ...).
#pragma once

#include <memory>
#include <utility>

#include "backend/backend.h"

namespace kiln::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const BackendIdentity& identity() const override { return inner_->identity(); }
  const BackendCapabilities& capabilities() const override { return inner_->capabilities(); }
  StorageFacet& storage() override { return inner_->storage(); }
  LinearFacet& linear() override { return inner_->linear(); }
  NormFacet& norm() override { return inner_->norm(); }
  AttentionFacet& attention() override { return inner_->attention(); }
  ConvFacet& conv() override { return inner_->conv(); }
  GdnFacet& gdn() override { return inner_->gdn(); }
  ElementwiseFacet& elementwise() override { return inner_->elementwise(); }
  SamplingFacet& sampling() override { return inner_->sampling(); }
  TrainingFacet& training() override { return inner_->training(); }
  OptimizerFacet& optimizer() override { return inner_->optimizer(); }
  ReplayFacet& replay() override { return inner_->replay(); }
  MemoryUsage memory_usage() const override { return inner_->memory_usage(); }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace kiln::testing
