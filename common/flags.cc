#include "common/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/closest_match.h"

#ifndef FRAMEWORM_VERSION
#define FRAMEWORM_VERSION "unknown"
#endif

namespace frameworm {
namespace {

std::string Canonical(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"-", "_"}});
}
std::string Dashed(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"_", "-"}});
}

// The binary's own flags (not absl's or a library's internals), by name.
std::vector<absl::CommandLineFlag*> OwnFlags() {
  std::vector<absl::CommandLineFlag*> out;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file(flag->Filename());
    if (absl::StrContains(file, "absl/")) continue;
    out.push_back(flag);
  }
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) {
    return a->Name() < b->Name();
  });
  return out;
}

absl::CommandLineFlag* Find(absl::string_view name) {
  absl::CommandLineFlag* f = absl::FindCommandLineFlag(Canonical(name));
  if (f == nullptr || absl::StrContains(f->Filename(), "absl/")) return nullptr;
  return f;
}

absl::Status Unknown(absl::string_view name) {
  std::vector<std::string> names;
  for (auto* f : OwnFlags()) names.push_back(Dashed(f->Name()));
  std::string best = ClosestMatch(Dashed(name), names);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown flag --", name,
                   best.empty() ? "" : absl::StrCat(" (did you mean --", best,
                                                    "?)")));
}

absl::Status Set(absl::CommandLineFlag* f, absl::string_view value,
                 absl::string_view source) {
  std::string error;
  if (f->ParseFrom(value, &error)) return absl::OkStatus();
  // absl's own text only repeats the value and the flag's name: say the
  // form the flag takes instead.
  if (absl::StartsWith(error, "Illegal value") || error.empty()) {
    if (f->IsOfType<absl::Duration>()) {
      error = "want a duration with its unit, such as 10s, 500ms or 5m";
    } else if (f->IsOfType<double>()) {
      error = "want a plain number (no unit)";
    } else if (f->IsOfType<int64_t>() || f->IsOfType<int>() || f->IsOfType<uint64_t>() ||
               f->IsOfType<uint32_t>() || f->IsOfType<size_t>()) {
      error = "want a plain integer (no unit)";
    } else if (f->IsOfType<bool>()) {
      error = "want true or false";
    } else {
      error.clear();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": bad value '", value, "'", error.empty() ? "" : ": ", error));
}

}  // namespace

const char* Version() { return FRAMEWORM_VERSION; }

absl::StatusOr<ParsedArgs> ParseFlags(const std::vector<std::string>& args,
                                      const FlagsConfig& config,
                                      const EnvLookup& env) {
  ParsedArgs out;
  std::vector<std::string> given;  // canonical names set on the command line
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (flags_done || a == "-" || a.empty() || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      out.help = true;
      return out;
    }
    if (a == "--version") {
      out.version = true;
      return out;
    }
    std::string name, value;
    bool has_value = false;
    if (auto alias = config.aliases.find(a); alias != config.aliases.end()) {
      name = alias->second;
    } else if (absl::StartsWith(a, "--")) {
      name = a.substr(2);
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", a, " (flags start with --)"));
    }
    absl::CommandLineFlag* f = Find(name);
    if (f == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* b = Find(name.substr(2));
      if (b != nullptr && b->IsOfType<bool>()) {
        if (absl::Status s = Set(b, "false", absl::StrCat("--", name)); !s.ok())
          return s;
        given.push_back(Canonical(b->Name()));
        continue;
      }
    }
    if (f == nullptr) return Unknown(name);
    if (!has_value) {
      if (f->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", Dashed(f->Name()), " needs a value"));
      }
    }
    if (absl::Status s = Set(f, value, absl::StrCat("--", Dashed(f->Name())));
        !s.ok())
      return s;
    given.push_back(Canonical(f->Name()));
  }
  for (const auto& [flag, var] : config.env_fallbacks) {
    if (std::find(given.begin(), given.end(), Canonical(flag)) != given.end())
      continue;
    std::optional<std::string> v = env(var);
    if (!v.has_value() || v->empty()) continue;
    absl::CommandLineFlag* f = Find(flag);
    if (f == nullptr) return Unknown(flag);  // a bug in the config
    if (absl::Status s = Set(f, *v, absl::StrCat("$", var)); !s.ok()) return s;
    out.from_env[Canonical(flag)] = var;
  }
  return out;
}

std::string FlagsHelp(const FlagsConfig& config) {
  std::string out = config.usage;
  if (!out.empty() && out.back() != '\n') out += "\n";
  out += "flags:\n";
  for (absl::CommandLineFlag* f : OwnFlags()) {
    absl::StrAppend(&out, "  --", Dashed(f->Name()), "\n      ", f->Help());
    const std::string def = f->DefaultValue();
    absl::StrAppend(&out, " (default: ", def.empty() ? "\"\"" : def);
    for (const auto& [flag, var] : config.env_fallbacks)
      if (Canonical(flag) == f->Name()) absl::StrAppend(&out, ", or $", var);
    out += ")\n";
  }
  for (const auto& [alias, flag] : config.aliases)
    absl::StrAppend(&out, "  ", alias, " is --", Dashed(flag), "\n");
  out += "  --help, --version\n";
  return out;
}

void FlagErrorExit(const FlagsConfig& config, const std::string& message) {
  std::fprintf(stderr, "%s: %s (see --help)\n", config.program.c_str(),
               message.c_str());
  std::exit(2);
}

std::vector<std::string> ParseFlagsOrExit(int argc, char** argv,
                                          const FlagsConfig& config) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<ParsedArgs> parsed =
      ParseFlags(args, config, ProcessEnvLookup());
  if (!parsed.ok())
    FlagErrorExit(config, std::string(parsed.status().message()));
  if (parsed->help) {
    std::fputs(FlagsHelp(config).c_str(), stdout);
    std::exit(0);
  }
  if (parsed->version) {
    std::printf("%s %s\n", config.program.c_str(), Version());
    std::exit(0);
  }
  return std::move(parsed->positional);
}

}  // namespace frameworm
