// libFuzzer target: the YAML job-spec parser and the rule list every
// submitted spec goes through (jobspec/job_spec.h). Any input must end in
// a spec or a clear error; never a crash, a hang or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>

#include "jobspec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<frameworm::v1::JobSpec> spec = frameworm::ParseJobSpecYaml(yaml, "fuzz.yaml");
  if (spec.ok()) {
    absl::StatusOr<frameworm::v1::JobSpec> normal = frameworm::NormalizeJobSpec(*spec);
    if (normal.ok()) (void)frameworm::UsesBuiltInTrainer(*normal);
  }
  return 0;
}
