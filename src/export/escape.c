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

/* The UTF-8 encoding of U+FFFD, written for every invalid byte. */
static const char replacement[3] = {(char)0xef, (char)0xbf, (char)0xbd};

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

void mlprof__out_utf8(mlprof__out *o, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    size_t run = 0, max = n - i < MLPROF__OUT_SLACK ? n - i : MLPROF__OUT_SLACK;
    while (run < max && s[i + run] < 0x80) run++;
    char *p;
    if (run) {
      p = mlprof__out_space(o, run);
      memcpy(p, s + i, run);
      mlprof__out_end(o, p + run);
      i += run;
      continue;
    }
    size_t len = mlprof__utf8_len(s + i, n - i);
    p = mlprof__out_space(o, 4);
    if (len) {
      memcpy(p, s + i, len);
      i += len;
      p += len;
    } else {
      memcpy(p, replacement, 3);
      i++;
      p += 3;
    }
    mlprof__out_end(o, p);
  }
}

void mlprof__out_text_str(mlprof__out *o, const char *s, size_t n) {
  out_clean(o, (const unsigned char *)s, n, 0, 0);
}

/* The entity of c in markup, or NULL: & < > " ' in HTML text and XML
 * alike (' as &#39; in HTML, &apos; in XML); in XML also TAB, LF and CR as
 * character references, so attribute values keep them. */
static const char *markup_entity(unsigned c, int xml) {
  switch (c) {
    case '&':
      return "&amp;";
    case '<':
      return "&lt;";
    case '>':
      return "&gt;";
    case '"':
      return "&quot;";
    case '\'':
      return xml ? "&apos;" : "&#39;";
    case '\t':
      return xml ? "&#9;" : NULL;
    case '\n':
      return xml ? "&#10;" : NULL;
    case '\r':
      return xml ? "&#13;" : NULL;
    default:
      return NULL;
  }
}

void mlprof__out_html_text(mlprof__out *o, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    char *p = mlprof__out_space(o, 8);
    const char *ent = markup_entity(s[i], 0);
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

/* Whether the valid UTF-8 character of len bytes at s is one XML 1.0 holds:
 * not a C1 control (U+0080 to U+009F), U+FFFE or U+FFFF. */
static int xml_char(const unsigned char *s, size_t len) {
  if (len == 2) return !(s[0] == 0xc2 && s[1] < 0xa0);
  if (len == 3) return !(s[0] == 0xef && s[1] == 0xbf && s[2] >= 0xbe);
  return len != 0;
}

void mlprof__out_xml_str(mlprof__out *o, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    char *p = mlprof__out_space(o, 6);
    unsigned c = s[i];
    const char *ent = markup_entity(c, 1);
    size_t len = ent        ? 0
                 : c < 0x80 ? c >= 0x20 && c != 0x7f
                            : mlprof__utf8_len(s + i, n - i);
    if (ent) {
      size_t k = strlen(ent);
      memcpy(p, ent, k);
      p += k;
      i++;
    } else if (xml_char(s + i, len)) {
      memcpy(p, s + i, len);
      p += len;
      i += len;
    } else {
      /* One byte at a time: a C1 control's or U+FFFE's continuation bytes
       * each become U+FFFD too. */
      memcpy(p, replacement, 3);
      p += 3;
      i++;
    }
    mlprof__out_end(o, p);
  }
}
