/* The subjects of sample rows, part of the file format's vocabulary (a
 * SAMPLES row's subject byte, docs/format.md): the sampler writes them, the
 * analyses and exporters read them, and neither uses the other. */
#ifndef MLPROF_SUBJECT_H
#define MLPROF_SUBJECT_H

typedef enum {
  MLPROF__SUBJECT_SYSTEM = 0,  /* id 0 */
  MLPROF__SUBJECT_PROCESS = 1, /* id: pid */
  MLPROF__SUBJECT_GPU = 2,     /* id: device index */
} mlprof__subject;

#endif
