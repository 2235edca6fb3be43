// frameworm-cli admin ca init|issue: the cluster CA on this machine
// (rpc/cluster_ca.h); no coordinator is called.
#include "absl/strings/str_cat.h"
#include "client/cli_commands.h"
#include "rpc/cluster_ca.h"

namespace frameworm {

int Admin(const Invocation& c) {
  const CommandFlags& f = c.flags;
  absl::Status s;
  std::string made;
  if (c.args[1] == "init") {
    s = f.days > 0 ? InitClusterCa(f.ca_dir, f.days) : InitClusterCa(f.ca_dir);
    made = absl::StrCat("cluster CA created in ", f.ca_dir,
                        " (ca.crt, ca.key: keep ca.key on this machine only)");
  } else {
    const std::string out = f.out_dir.empty() ? absl::StrCat(f.role, "-", f.name) : f.out_dir;
    s = f.days > 0 ? IssueCertificate(f.ca_dir, f.role, f.name, out, f.days)
                   : IssueCertificate(f.ca_dir, f.role, f.name, out);
    made = absl::StrCat("issued ", f.role, ":", f.name, " in ", out,
                        " (ca.crt, tls.crt, tls.key): pass it as --tls-dir ", out);
  }
  if (!s.ok()) {
    c.err << "frameworm-cli: admin ca " << c.args[1] << ": " << absl::StatusCodeToString(s.code())
          << ": " << s.message() << "\n";
    return 1;
  }
  c.out << made << "\n";
  return 0;
}

}  // namespace frameworm
