#include <pthread.h>

#include "wire.h"

/* Slicing-by-4 table CRC-32: the reader checks every chunk of files that can
 * hold hundreds of megabytes, so byte-at-a-time would dominate load time. */
static uint32_t crc_table[4][256];

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 4; t++)
      crc_table[t][i] =
          (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t mlprof__crc32(uint32_t crc, const void *buf, size_t len) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, crc_init);
  const uint8_t *p = buf;
  crc = ~crc;
  while (len >= 4) {
    crc ^= mlprof__get_u32(p);
    crc = crc_table[3][crc & 0xff] ^ crc_table[2][(crc >> 8) & 0xff] ^
          crc_table[1][(crc >> 16) & 0xff] ^ crc_table[0][crc >> 24];
    p += 4;
    len -= 4;
  }
  while (len--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}
