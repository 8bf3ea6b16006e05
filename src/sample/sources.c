/* The one explicit list of sources, in the order the sampler asks them:
 * process rows first, then the machine, then the accelerators. */
#include "sample.h"

const mlprof__source *const mlprof__sources[] = {
    &mlprof__source_proc,   &mlprof__source_system, &mlprof__source_thermal,
    &mlprof__source_energy, &mlprof__source_nvml,
};

const size_t mlprof__nsources =
    sizeof mlprof__sources / sizeof mlprof__sources[0];
