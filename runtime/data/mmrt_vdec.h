/* mmrt_vdec.h: video files in (MP4/MOV and Matroska/WebM through
 * libavformat, H.264, HEVC, VP8, VP9, AV1, MPEG-4 and FFV1 through
 * libavcodec, RGB through libswscale), sampled to a model's frame count
 * and fps, cropped and resized to its resolution or to the nearest of its
 * resolution buckets, and OpenSoraPlan's dataset JSON.  docs/video.md
 * describes the rules.
 *
 * A decoded clip has the runtime's clip value range and layout
 * (mmrt_video.h): f32 in [0, 1] (byte / 255), laid out (C = 3, T, H, W):
 * channel planes R, G, B, each the T frames in order, each row major.
 *
 * Frame sampling: frame n is the n-th frame the decoder gives, in
 * presentation order (nominal time n / src_fps).  With s = the stream's
 * frame rate (libavformat's guess: avg_frame_rate, else r_frame_rate) and
 * f = the wanted fps (0: f = s), the step is d = 1 when |s - f| < 0.1,
 * else d = s / f (a double), and frame k of the clip (k = 0 .. T-1) is
 * source frame floor(k * d): OpenSoraPlan's np.arange(0, n, d).astype(int)
 * from its first frame.  The video must hold frame floor((T-1) * d).
 * Decoding stops after that frame: nothing later is read or decoded.
 *
 * Crop and resize (OpenSoraPlan's CenterCropResizeVideo): to H x W from
 * h x w, the largest centered region of H / W's aspect ratio is cut
 * (h / w > H / W: ch = (int)(w * H / W), cw = w; else ch = h,
 * cw = (int)(h * W / H); top = (h - ch) / 2, left = (w - cw) / 2, integer
 * halves rounded down), then resized with mmrt_image_resize (PIL-exact
 * antialiased bicubic) to H x W.
 *
 * Buckets: of the declared H x W buckets, the one whose aspect ratio is
 * nearest the source's in log scale (|log(W / H) - log(w / h)| least,
 * i.e. the same factor wider or taller counts alike); of equally near
 * ones, the first listed. */
#ifndef MMRT_VDEC_H
#define MMRT_VDEC_H

#include <stddef.h>
#include <stdint.h>

#include "mmrt_log.h"

#define MMRT_VDEC_MAX_FRAMES     4096
#define MMRT_VDEC_MAX_SIDE       8192
#define MMRT_VDEC_MAX_PIXELS_DEF (3840LL * 2160LL)

typedef struct MmrtVdecSpec {
  int frames;         /* T >= 1 */
  double fps;         /* wanted fps; 0: the source's */
  int h, w;           /* the resolution when nbuckets == 0 */
  const int *buckets; /* nbuckets pairs (H, W) */
  int nbuckets;
  int64_t max_pixels; /* refuse sources larger; <= 0: MMRT_VDEC_MAX_PIXELS_DEF */
} MmrtVdecSpec;

typedef struct MmrtVdecClip {
  char container[64]; /* libavformat's name, e.g. "mov,mp4,m4a,3gp,3g2,mj2" */
  char codec[32];     /* e.g. "h264" */
  double duration;    /* seconds (0 when unknown) */
  double src_fps;
  int src_w, src_h;
  int frames, h, w; /* the clip's T, H, W */
  int bucket;       /* index into the buckets, -1 with none */
  int decoded;      /* source frames decoded */
  int *index;       /* T source frame indices */
  float *pix;       /* 3 * T * H * W */
} MmrtVdecClip;

/* The step rule above: idx[k] for k < frames. */
void mmrt_vdec_indices(int frames, double src_fps, double fps, int *idx);

/* The bucket rule above: an index into buckets (pairs H, W). */
int mmrt_vdec_pick_bucket(int src_w, int src_h, const int *buckets, int nbuckets);

/* Decode the video file at path (a regular file), or the len bytes at data
 * (name: for messages).  On failure *out holds nothing to free and err
 * names the file and what was wrong. */
int mmrt_vdec_read(const char *path, const MmrtVdecSpec *spec, MmrtVdecClip *out, char *err,
                   size_t errlen);
int mmrt_vdec_decode_mem(const char *name, const uint8_t *data, size_t len,
                         const MmrtVdecSpec *spec, MmrtVdecClip *out, char *err, size_t errlen);
void mmrt_vdec_free(MmrtVdecClip *c);

/* ---- OpenSoraPlan's dataset JSON ----
 * A list of objects {"path": str, "cap": str or [str, ...], "num_frames":
 * int, "fps": number, "resolution": {"height": int, "width": int}}
 * (other keys ignored), path relative to the JSON file's folder.  Every
 * entry is checked: each field there and of its type, the file a regular
 * file, and num_frames enough for spec's frame count at its fps (the last
 * index by the step rule < num_frames).  A failure names the JSON file,
 * the entry's index (from 0) and the field. */
typedef struct MmrtVdecEntry {
  char *path; /* resolved against the JSON's folder */
  char *cap;  /* the first caption */
  int num_frames;
  double fps;
  int height, width;
  char *bad; /* mmrt_vdec_json_read_ex with keep_bad: why the entry is unusable, else NULL */
} MmrtVdecEntry;

int mmrt_vdec_json_read(const char *json_path, const MmrtVdecSpec *spec, MmrtVdecEntry **out,
                        int *n, char *err, size_t errlen);
/* keep_bad: an entry that fails its checks does not stop the read; its
 * message ("FILE: entry I: ...") is kept in its `bad` (the list's own
 * faults -- not JSON, not a list, empty -- still do).  A name ending in
 * .jsonl is JSON Lines: one such object a line (blank lines skipped; the
 * entries numbered from 0 over the others). */
int mmrt_vdec_json_read_ex(const char *json_path, const MmrtVdecSpec *spec, int keep_bad,
                           MmrtVdecEntry **out, int *n, char *err, size_t errlen);
void mmrt_vdec_json_free(MmrtVdecEntry *e, int n);

#endif
