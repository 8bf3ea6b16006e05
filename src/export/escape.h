/* The escaping of untrusted strings (zone names, metadata, command lines)
 * for JSON, CSV, HTML, XML, Prometheus and the terminal, written through the
 * output writer (src/base/out.h).
 *
 * Profile strings are arbitrary bytes. Every escaper turns invalid UTF-8 into
 * U+FFFD and control characters into something inert, so the output is valid
 * UTF-8 whatever the profile holds. */
#ifndef MLPROF_ESCAPE_H
#define MLPROF_ESCAPE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/out.h"

/* Length of the valid UTF-8 sequence starting at s (2 to 4), or 0 when the
 * byte at s does not start one (stray continuation, overlong form, surrogate,
 * beyond U+10FFFF, or cut short by the end of the n bytes, or by a NUL).
 * s[0] must be >= 0x80. */
size_t mlprof__utf8_len(const unsigned char *s, size_t n);

/* A JSON string literal, quotes included. '"' and '\' are escaped, every
 * control character (and DEL) becomes \u00XX, '<' '>' '&' and U+2028/2029
 * become \u escapes so the text can sit inside HTML <script>, and each byte
 * that does not start a valid UTF-8 sequence becomes U+FFFD. */
void mlprof__out_json_str(mlprof__out *o, const char *s, size_t n);

/* A string's bytes as valid UTF-8, without quotes or escapes (for a
 * length-delimited field, such as a protobuf string): each byte that does not
 * start a valid UTF-8 sequence becomes U+FFFD, everything else (control
 * characters included, as a JSON string decodes them) is copied. */
void mlprof__out_utf8(mlprof__out *o, const char *s, size_t n);

/* A CSV field (RFC 4180): quoted when it holds a comma, quote, CR, LF, or
 * leading or trailing space, with quotes doubled. A field starting with
 * = + - @ or TAB gets a leading ' so spreadsheets do not run it as a formula.
 * Control characters other than TAB, CR and LF, and invalid UTF-8, become
 * U+FFFD. */
void mlprof__out_csv_field(mlprof__out *o, const char *s, size_t n);

/* A string for a terminal: control characters (escape sequences included)
 * and invalid UTF-8 become U+FFFD; everything else is copied. */
void mlprof__out_text_str(mlprof__out *o, const char *s, size_t n);

/* Text for an HTML element or a quoted attribute value: & < > " ' become
 * entities, control characters and invalid UTF-8 become U+FFFD. */
void mlprof__out_html_text(mlprof__out *o, const char *s, size_t n);

/* Text or an attribute value in XML 1.0 (JUnit): & < > " ' become entities,
 * TAB, LF and CR character references (so attribute values keep them);
 * what XML cannot hold (other control characters, U+FFFE, U+FFFF, C1
 * controls) and invalid UTF-8 become U+FFFD, one for each byte. */
void mlprof__out_xml_str(mlprof__out *o, const char *s, size_t n);

/* A Prometheus label value (text exposition format), without the quotes:
 * '\', '"' and newline are escaped; other control characters and invalid
 * UTF-8 become U+FFFD. */
void mlprof__out_prom_label(mlprof__out *o, const char *s, size_t n);
/* Whether mlprof__out_prom_label writes s without a U+FFFD: then distinct
 * strings give distinct labels. */
int mlprof__prom_label_exact(const char *s, size_t n);

#endif
