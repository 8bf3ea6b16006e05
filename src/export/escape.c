#include "escape.h"

#include <errno.h>
#include <math.h>
#include <mlprof.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_FD_BUFFER (1u << 20)
#define OUT_MEM_INITIAL (2 * MLPROF__OUT_SLACK)

/* The UTF-8 encoding of U+FFFD, written for every invalid byte. */
static const char replacement[3] = {(char)0xef, (char)0xbf, (char)0xbd};

int mlprof__write_atomically(const char *path,
                             int (*fn)(void *ctx, mlprof__out *o, char *err,
                                       size_t errlen),
                             void *ctx, char *err, size_t errlen) {
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  snprintf(tmp, n, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    free(tmp);
    return MLPROF_EIO;
  }
  /* mkstemp makes the file 0600: give it the mode a new file would get. */
  mode_t mask = umask(0);
  umask(mask);
  int rc = 0;
  mlprof__out o;
  err[0] = '\0';
  if (fchmod(fd, 0666 & ~mask) != 0) {
    snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
    rc = MLPROF_EIO;
  } else if (mlprof__out_open(&o, fd) != 0) {
    snprintf(err, errlen, "out of memory");
    rc = MLPROF_ENOMEM;
  } else {
    rc = fn(ctx, &o, err, errlen);
    int wrc = mlprof__out_flush(&o);
    if (!rc) rc = wrc;
    if (rc == MLPROF_EIO && o.err == MLPROF_EIO)
      snprintf(err, errlen, "cannot write %s: %s", path, strerror(o.sys_errno));
    else if (rc && !err[0])
      snprintf(err, errlen, "cannot write %s: %s", path, mlprof_strerror(rc));
    mlprof__out_close(&o);
  }
  if (close(fd) != 0 && !rc) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    rc = MLPROF_EIO;
  }
  if (!rc && rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    rc = MLPROF_EIO;
  }
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}

int mlprof__out_open(mlprof__out *o, int fd) {
  memset(o, 0, sizeof *o);
  o->fd = fd;
  o->cap = fd >= 0 ? OUT_FD_BUFFER : OUT_MEM_INITIAL;
  o->buf = malloc(o->cap);
  if (!o->buf) return MLPROF_ENOMEM;
  return 0;
}

void mlprof__out_close(mlprof__out *o) {
  free(o->buf);
  o->buf = NULL;
  o->len = o->cap = 0;
}

static void out_fail(mlprof__out *o, int err, int sys_errno) {
  if (!o->err) {
    o->err = err;
    o->sys_errno = sys_errno;
  }
}

int mlprof__out_flush(mlprof__out *o) {
  if (o->fd < 0) return o->err;
  size_t off = 0;
  while (off < o->len && !o->err) {
    ssize_t w = write(o->fd, o->buf + off, o->len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      out_fail(o, MLPROF_EIO, w < 0 ? errno : EIO);
      break;
    }
    off += (size_t)w;
  }
  o->len = 0;
  return o->err;
}

char *mlprof__out_grow(mlprof__out *o, size_t n) {
  if (o->fd >= 0) {
    mlprof__out_flush(o);
  } else if (!o->err) {
    size_t cap = o->cap;
    while (cap - o->len < n) cap *= 2;
    char *b = realloc(o->buf, cap);
    if (b) {
      o->buf = b;
      o->cap = cap;
    } else {
      out_fail(o, MLPROF_ENOMEM, ENOMEM);
    }
  }
  /* After an error the output is discarded: start again at the front, where
   * the buffer always has room for MLPROF__OUT_SLACK bytes. */
  if (o->cap - o->len < n) o->len = 0;
  return o->buf + o->len;
}

void mlprof__out_write(mlprof__out *o, const void *s, size_t n) {
  const char *c = s;
  while (n > 0) {
    size_t k = n < MLPROF__OUT_SLACK ? n : MLPROF__OUT_SLACK;
    char *p = mlprof__out_space(o, k);
    memcpy(p, c, k);
    mlprof__out_end(o, p + k);
    c += k;
    n -= k;
  }
}

void mlprof__out_str(mlprof__out *o, const char *s) {
  mlprof__out_write(o, s, strlen(s));
}

void mlprof__out_printf(mlprof__out *o, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    mlprof__out_write(o, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    out_fail(o, MLPROF_ENOMEM, ENOMEM);
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  mlprof__out_write(o, big, (size_t)n);
  free(big);
}

/* Two digits at a time from a table: the exporters format several numbers
 * per event, so this loop is on the hot path of the trace export. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536"
    "37383940414243444546474849505152535455565758596061626364656667686970717273"
    "7475767778798081828384858687888990919293949596979899";

char *mlprof__fmt_u64(char *p, uint64_t v) {
  char tmp[20];
  char *t = tmp + sizeof tmp;
  while (v >= 100) {
    unsigned r = (unsigned)(v % 100);
    v /= 100;
    t -= 2;
    memcpy(t, digit_pairs + 2 * r, 2);
  }
  if (v >= 10) {
    t -= 2;
    memcpy(t, digit_pairs + 2 * v, 2);
  } else {
    *--t = (char)('0' + v);
  }
  size_t len = (size_t)(tmp + sizeof tmp - t);
  memcpy(p, t, len);
  return p + len;
}

char *mlprof__fmt_i64(char *p, int64_t v) {
  if (v < 0) {
    *p++ = '-';
    return mlprof__fmt_u64(p, (uint64_t)0 - (uint64_t)v);
  }
  return mlprof__fmt_u64(p, (uint64_t)v);
}

char *mlprof__fmt_us(char *p, uint64_t ns) {
  unsigned frac = (unsigned)(ns % 1000);
  p = mlprof__fmt_u64(p, ns / 1000);
  *p++ = '.';
  *p++ = (char)('0' + frac / 100);
  memcpy(p, digit_pairs + 2 * (frac % 100), 2);
  return p + 2;
}

void mlprof__out_u64(mlprof__out *o, uint64_t v) {
  char *p = mlprof__out_space(o, 24);
  mlprof__out_end(o, mlprof__fmt_u64(p, v));
}

void mlprof__out_i64(mlprof__out *o, int64_t v) {
  char *p = mlprof__out_space(o, 24);
  mlprof__out_end(o, mlprof__fmt_i64(p, v));
}

void mlprof__out_f64(mlprof__out *o, double v) {
  static const double pow10[] = {1,   1e1, 1e2, 1e3, 1e4,
                                 1e5, 1e6, 1e7, 1e8, 1e9};
  if (!isfinite(v)) {
    mlprof__out_lit(o, "null");
    return;
  }
  /* Values with few decimals (0.25, 3.5, 1e-3) are printed from an integer:
   * m / 10^k == v proves the decimal reads back as v, since the division of
   * exact operands is correctly rounded, as strtod is. printf is the slow
   * path, for values that need all 17 digits. */
  for (int k = 0; k < 10; k++) {
    double m = v * pow10[k];
    if (fabs(m) >= 9007199254740992.0) break;
    if (m != floor(m) || m / pow10[k] != v) continue;
    char *p = mlprof__out_space(o, 32);
    if (m < 0) *p++ = '-';
    char digits[24];
    char *e = mlprof__fmt_u64(digits, (uint64_t)fabs(m));
    size_t n = (size_t)(e - digits), lead = n > (size_t)k ? n - (size_t)k : 0;
    memcpy(p, digits, lead);
    p += lead;
    if (k) {
      *p++ = lead ? '.' : '0';
      if (!lead) *p++ = '.';
      for (size_t z = n; z < (size_t)k; z++) *p++ = '0';
      memcpy(p, digits + lead, n - lead);
      p += n - lead;
    }
    mlprof__out_end(o, p);
    return;
  }
  char b[32];
  snprintf(b, sizeof b, "%.17g", v);
  mlprof__out_str(o, b);
}

size_t mlprof__utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return len;
}

/* Length of the character at s (n bytes left) that the escapers copy as it
 * is, or 0 for one they write as U+FFFD: an invalid byte, or a control
 * character (C0, DEL, or C1: U+0080 to U+009F, U+009B being a terminal's
 * CSI). */
static size_t plain_len(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return s[0] < 0x20 || s[0] == 0x7f ? 0 : 1;
  size_t len = mlprof__utf8_len(s, n);
  return len == 2 && s[0] == 0xc2 && s[1] < 0xa0 ? 0 : len;
}

/* A character an escaper leaves as it is, made safe: plain_len's copied,
 * anything else written as U+FFFD (for one character, or one invalid
 * byte). Sets *used to the bytes consumed and returns the end of what it
 * wrote (at most 4 bytes). */
static char *put_plain(char *p, const unsigned char *s, size_t n,
                       size_t *used) {
  size_t len = plain_len(s, n);
  if (len == 0) {
    size_t k = s[0] >= 0x80 ? mlprof__utf8_len(s, n) : 0;
    memcpy(p, replacement, 3);
    *used = k ? k : 1;
    return p + 3;
  }
  memcpy(p, s, len);
  *used = len;
  return p + len;
}

/* Bytes of ASCII a JSON string carries as they are. */
static int json_plain(unsigned char c) {
  return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' &&
         c != '>' && c != '&';
}

static char *put_u00(char *p, unsigned c) {
  static const char hex[] = "0123456789abcdef";
  memcpy(p, "\\u00", 4);
  p[4] = hex[c >> 4];
  p[5] = hex[c & 15];
  return p + 6;
}

void mlprof__out_json_str(mlprof__out *o, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  char *p = mlprof__out_space(o, 1);
  *p++ = '"';
  mlprof__out_end(o, p);
  while (i < n) {
    size_t run = 0, max = n - i < MLPROF__OUT_SLACK ? n - i : MLPROF__OUT_SLACK;
    while (run < max && json_plain(s[i + run])) run++;
    if (run) {
      p = mlprof__out_space(o, run);
      memcpy(p, s + i, run);
      mlprof__out_end(o, p + run);
      i += run;
      continue;
    }
    unsigned c = s[i];
    p = mlprof__out_space(o, 6);
    if (c == '"' || c == '\\') {
      *p++ = '\\';
      *p++ = (char)c;
      i++;
    } else if (c < 0x80) {
      p = put_u00(p, c);
      i++;
    } else {
      size_t len = mlprof__utf8_len(s + i, n - i);
      if (len == 0) {
        memcpy(p, replacement, 3);
        p += 3;
        i++;
      } else if (len == 3 && c == 0xe2 && s[i + 1] == 0x80 &&
                 (s[i + 2] == 0xa8 || s[i + 2] == 0xa9)) {
        /* U+2028 and U+2029 end a line inside a JavaScript string. */
        memcpy(p, s[i + 2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
        p += 6;
        i += 3;
      } else {
        memcpy(p, s + i, len);
        p += len;
        i += len;
      }
    }
    mlprof__out_end(o, p);
  }
  p = mlprof__out_space(o, 1);
  *p++ = '"';
  mlprof__out_end(o, p);
}

/* Writes s as valid UTF-8 with each control character for which keep() is
 * false, and each invalid byte, replaced by U+FFFD. The CSV and terminal
 * forms differ only in which control characters they keep and in quoting. */
static void out_clean(mlprof__out *o, const unsigned char *s, size_t n,
                      int keep_crlf_tab, int double_quotes) {
  size_t i = 0;
  while (i < n) {
    char *p = mlprof__out_space(o, 4);
    unsigned c = s[i];
    if (c >= 0x80) {
      size_t len;
      p = put_plain(p, s + i, n - i, &len);
      i += len;
    } else if (c < 0x20 || c == 0x7f) {
      if (keep_crlf_tab && (c == '\t' || c == '\r' || c == '\n')) {
        *p++ = (char)c;
      } else {
        memcpy(p, replacement, 3);
        p += 3;
      }
      i++;
    } else {
      *p++ = (char)c;
      if (c == '"' && double_quotes) *p++ = '"';
      i++;
    }
    mlprof__out_end(o, p);
  }
}

void mlprof__out_csv_field(mlprof__out *o, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  int formula = n > 0 && (s[0] == '=' || s[0] == '+' || s[0] == '-' ||
                          s[0] == '@' || s[0] == '\t');
  int quote = n > 0 && (s[0] == ' ' || s[n - 1] == ' ');
  for (size_t i = 0; i < n && !quote; i++)
    quote = s[i] == ',' || s[i] == '"' || s[i] == '\r' || s[i] == '\n';
  if (quote) mlprof__out_lit(o, "\"");
  if (formula) mlprof__out_lit(o, "'");
  out_clean(o, s, n, 1, quote);
  if (quote) mlprof__out_lit(o, "\"");
}

void mlprof__out_text_str(mlprof__out *o, const char *s, size_t n) {
  out_clean(o, (const unsigned char *)s, n, 0, 0);
}

void mlprof__out_html_text(mlprof__out *o, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    char *p = mlprof__out_space(o, 8);
    unsigned c = s[i];
    const char *ent = NULL;
    switch (c) {
      case '&':
        ent = "&amp;";
        break;
      case '<':
        ent = "&lt;";
        break;
      case '>':
        ent = "&gt;";
        break;
      case '"':
        ent = "&quot;";
        break;
      case '\'':
        ent = "&#39;";
        break;
      default:
        break;
    }
    if (ent) {
      size_t k = strlen(ent);
      memcpy(p, ent, k);
      p += k;
      i++;
    } else {
      size_t len;
      p = put_plain(p, s + i, n - i, &len);
      i += len;
    }
    mlprof__out_end(o, p);
  }
}

void mlprof__out_prom_label(mlprof__out *o, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    char *p = mlprof__out_space(o, 4);
    unsigned c = s[i];
    if (c == '\\' || c == '"') {
      *p++ = '\\';
      *p++ = (char)c;
      i++;
    } else if (c == '\n') {
      *p++ = '\\';
      *p++ = 'n';
      i++;
    } else {
      size_t len;
      p = put_plain(p, s + i, n - i, &len);
      i += len;
    }
    mlprof__out_end(o, p);
  }
}

int mlprof__prom_label_exact(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  for (size_t i = 0, len; i < n; i += len) {
    len = s[i] == '\n' ? 1 : plain_len(s + i, n - i);
    if (!len) return 0;
  }
  return 1;
}
