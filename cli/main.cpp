// flytune: generate, compile, time, verify and record routed-GEMM (MoE) kernels.
#include "cli/app.hpp"

int main(int argc, char** argv) { return ft::cli::run_app(argc, argv); }
