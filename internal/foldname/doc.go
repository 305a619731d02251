// Package foldname compares file names the way case-insensitive file
// systems do, so that a name hidden by a never glob stays hidden when the
// disk would open it under another spelling.
//
// The attack: on exFAT, NTFS, an SMB share, an ext4 or tmpfs casefold
// directory or a FUSE file system, "src/.ENV", "ID.PEM" and, on vfat and
// NTFS, ".env." and ".env " open the very file that ".env" and "*.pem"
// hide. A byte-for-byte match lets them through.
//
// A Key is what such file systems compare; two names with the same key may
// be one file. It is the union of what each of them merges, so that it is
// never looser than any of them (and on a case-sensitive disk merely
// stricter):
//
//   - Unicode case: each rune is mapped to the lower case of its upper case
//     (unicode.ToLower(unicode.ToUpper(r))). That is constant on every
//     simple case-folding orbit (K, k and the Kelvin sign K; s, S and the
//     long s ſ) as the Linux casefold tables fold, and on every upper-case
//     class as NTFS and exFAT compare through their upcase table (which is
//     why the Turkish dotless ı keys as i: NTFS upcases it to I).
//   - The full case foldings that spell Latin letters: ß and ẞ key as "ss",
//     the ligatures ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ as their letters, İ as "i̇" (i, U+0307),
//     as the Linux casefold (NFD + full folding) does.
//   - The canonical singletons outside CJK that NFD maps to another
//     character: ; for U+037E, ` for U+1FEF, and the like.
//   - Default-ignorable code points (format characters such as U+200B..
//     U+200F, U+FEFF, the soft hyphen, variation selectors) are dropped:
//     Linux before 6.13 ignored them in casefolded names.
//   - Trailing dots and spaces of a name are dropped, as Win32, vfat and
//     SMB servers drop them (".env." and ".env " name ".env"), unless
//     nothing else is left.
//
// Not claimed: the other full foldings (Greek and Armenian letters with
// combining marks), NFD beyond the singletons (a precomposed letter in a
// glob does not match its decomposed spelling), compatibility forms
// (fullwidth Ｅ, Cyrillic е and other look-alikes stay distinct, as on
// every file system named above), and 8.3 short names (ENV~1) on vfat.
// Globs written in ASCII, the usual case, are covered completely but for
// short names.
//
// The package is pure and allocation-free for a name that is already its
// own key (lower-case ASCII without trailing dots or spaces).
package foldname
