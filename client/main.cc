// frameworm-cli: a thin main over client/cli.h. The process's environment
// and terminal are read here only.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"

int main(int argc, char** argv) {
  frameworm::CliOptions o;
  o.env = frameworm::ProcessEnvLookup();
  o.live = ::isatty(STDOUT_FILENO);
  std::vector<std::string> args(argv + 1, argv + argc);
  return frameworm::RunCli(args, o, std::cout, std::cerr);
}
