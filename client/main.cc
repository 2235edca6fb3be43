// frameworm-cli: a thin main over client/cli.h. The environment is read here
// only.
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "client/cli.h"

int main(int argc, char** argv) {
  frameworm::CliOptions o;
  if (const char* c = std::getenv("FRAMEWORM_COORDINATOR"); c && *c) {
    o.default_coordinator = c;
  }
  o.live = ::isatty(STDOUT_FILENO);
  std::vector<std::string> args(argv + 1, argv + argc);
  return frameworm::RunCli(args, o, std::cout, std::cerr);
}
