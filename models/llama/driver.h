// The controller of disco-demo's decoder: greedy generation from a Hugging Face checkpoint (or
// its HDF5 conversion) with tensor parallelism over every rank of the job.
#ifndef DISCO_MODELS_LLAMA_DRIVER_H_
#define DISCO_MODELS_LLAMA_DRIVER_H_

namespace llama {

/// Parses the command line (see Usage in driver.cc) and runs disco::Main on every rank. Returns
/// the process exit code (2: a bad command line).
int DemoMain(int argc, char** argv);

}  // namespace llama

#endif  // DISCO_MODELS_LLAMA_DRIVER_H_
