#include <exception>
#include <iostream>

#include "cli/cli.hpp"

int main(int argc, char** argv) {
  try {
    return moemem::cli::run(argc, argv, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "moemem: internal error: " << e.what() << "\n";
    return 3;
  }
}
