/* mmrt_vdec.c: video files through FFmpeg's libraries (mmrt_vdec.h).
 * The file is read through our own AVIOContext over a file descriptor or
 * a memory buffer: no protocol is opened and no other file (a playlist's,
 * a concat list's) can be reached; only the mov and matroska demuxers and
 * the decoders named in the header are allowed. */
#include "mmrt_vdec.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mmrt_image.h"

#define FORMATS "mov,matroska"
#define CODECS  "h264,hevc,vp8,vp9,libvpx,libvpx-vp9,av1,libdav1d,libaom-av1,mpeg4,ffv1"

void mmrt_vdec_indices(int frames, double src_fps, double fps, int *idx) {
  double d = (fps <= 0 || fabs(src_fps - fps) < 0.1) ? 1.0 : src_fps / fps;
  for (int k = 0; k < frames; k++) idx[k] = (int)floor((double)k * d);
}

int mmrt_vdec_pick_bucket(int src_w, int src_h, const int *buckets, int nbuckets) {
  double r = log((double)src_w / src_h), best = INFINITY;
  int bi = 0;
  for (int i = 0; i < nbuckets; i++) {
    double e = fabs(log((double)buckets[2 * i + 1] / buckets[2 * i]) - r);
    if (e < best) best = e, bi = i;
  }
  return bi;
}

/* ---- the byte source: a file descriptor or memory ---- */
typedef struct Src {
  int fd;
  const uint8_t *data;
  int64_t len, pos;
} Src;

static int src_read(void *o, uint8_t *buf, int n) {
  Src *s = o;
  if (s->pos >= s->len) return AVERROR_EOF;
  if (n > s->len - s->pos) n = (int)(s->len - s->pos);
  if (s->data) {
    memcpy(buf, s->data + s->pos, (size_t)n);
  } else {
    ssize_t r = pread(s->fd, buf, (size_t)n, s->pos);
    if (r < 0) return AVERROR(errno);
    if (r == 0) return AVERROR_EOF;
    n = (int)r;
  }
  s->pos += n;
  return n;
}

static int64_t src_seek(void *o, int64_t off, int whence) {
  Src *s = o;
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return s->len;
  int64_t p = whence == SEEK_SET   ? off
              : whence == SEEK_CUR ? s->pos + off
              : whence == SEEK_END ? s->len + off
                                   : -1;
  if (p < 0 || p > s->len) return AVERROR(EINVAL);
  return s->pos = p;
}

static const char *averr(int e, char *buf) {
  if (av_strerror(e, buf, AV_ERROR_MAX_STRING_SIZE) < 0)
    snprintf(buf, AV_ERROR_MAX_STRING_SIZE, "error %d", e);
  return buf;
}

/* Center crop of aspect H / W from the w x h RGB frame, resized to W x H
 * into rgb (H * W * 3). */
static int crop_resize(const uint8_t *in, int w, int h, int W, int H, uint8_t *tmp, uint8_t *rgb) {
  int ch, cw;
  if ((double)h / w > (double)H / W)
    ch = (int)((double)w * H / W), cw = w;
  else
    ch = h, cw = (int)((double)h * W / H);
  if (ch < 1) ch = 1;
  if (cw < 1) cw = 1;
  int top = (h - ch) / 2, left = (w - cw) / 2;
  for (int y = 0; y < ch; y++)
    memcpy(tmp + (size_t)y * cw * 3, in + ((size_t)(top + y) * w + left) * 3, (size_t)cw * 3);
  return mmrt_image_resize(tmp, cw, ch, rgb, W, H);
}

typedef struct Dec {
  const char *name;
  AVFormatContext *fmt;
  AVCodecContext *cc;
  AVFrame *fr;
  AVPacket *pkt;
  struct SwsContext *sws;
  uint8_t *rgb, *tmp, *small; /* the frame as RGB, the crop, the resized crop */
  size_t rgb_cap, tmp_cap;
  int stream, n; /* video stream; frames decoded so far */
  int next;      /* next clip frame to fill */
} Dec;

/* One decoded frame: fill every clip slot that asks for it. */
static int take_frame(Dec *d, MmrtVdecClip *c, int64_t max_pixels, char *err, size_t errlen) {
  AVFrame *f = d->fr;
  int n = d->n++;
  if (d->next >= c->frames || c->index[d->next] != n) return MMRT_OK;
  if (f->width < 1 || f->height < 1 || f->width > MMRT_VDEC_MAX_SIDE ||
      f->height > MMRT_VDEC_MAX_SIDE || (int64_t)f->width * f->height > max_pixels)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: frame %d is %dx%d (at most %lld pixels)",
                     d->name, n, f->width, f->height, (long long)max_pixels);
  size_t need = (size_t)f->width * f->height * 3;
  if (need > d->rgb_cap) {
    uint8_t *a = realloc(d->rgb, need), *b = a ? realloc(d->tmp, need) : NULL;
    if (a) d->rgb = a;
    if (b) d->tmp = b;
    if (!a || !b) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", d->name);
    d->rgb_cap = need;
  }
  d->sws = sws_getCachedContext(
      d->sws, f->width, f->height, f->format, f->width, f->height, AV_PIX_FMT_RGB24,
      SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
  if (!d->sws)
    return mmrt_errf(
        err, errlen, MMRT_ERR_FORMAT, "%s: frame %d: cannot convert %s to RGB", d->name, n,
        av_get_pix_fmt_name(f->format) ? av_get_pix_fmt_name(f->format) : "(unknown pixel format)");
  int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : (int)f->colorspace;
  const int *coef = sws_getCoefficients(cs);
  sws_setColorspaceDetails(d->sws, coef, f->color_range == AVCOL_RANGE_JPEG, coef, 1, 0, 1 << 16,
                           1 << 16);
  uint8_t *dst[4] = {d->rgb, NULL, NULL, NULL};
  int stride[4] = {f->width * 3, 0, 0, 0};
  if (sws_scale(d->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, stride) !=
      f->height)
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: frame %d: RGB conversion failed", d->name,
                     n);
  if (crop_resize(d->rgb, f->width, f->height, c->w, c->h, d->tmp, d->small) != MMRT_OK)
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory resizing", d->name);
  size_t plane = (size_t)c->frames * c->h * c->w, img = (size_t)c->h * c->w;
  while (d->next < c->frames && c->index[d->next] == n) {
    float *o = c->pix + (size_t)d->next * img;
    for (size_t p = 0; p < img; p++)
      for (int ch = 0; ch < 3; ch++) o[ch * plane + p] = d->small[p * 3 + ch] / 255.0f;
    d->next++;
  }
  return MMRT_OK;
}

/* Receive every frame the decoder has. */
static int drain(Dec *d, MmrtVdecClip *c, int64_t max_pixels, char *err, size_t errlen) {
  char eb[AV_ERROR_MAX_STRING_SIZE];
  for (;;) {
    int r = avcodec_receive_frame(d->cc, d->fr);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return MMRT_OK;
    if (r < 0)
      return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: decoding frame %d: %s", d->name, d->n,
                       averr(r, eb));
    int s = take_frame(d, c, max_pixels, err, errlen);
    av_frame_unref(d->fr);
    if (s != MMRT_OK) return s;
    if (d->next >= c->frames) return MMRT_OK;
  }
}

static int decode(const char *name, Src *src, const MmrtVdecSpec *spec, MmrtVdecClip *c, char *err,
                  size_t errlen) {
  char eb[AV_ERROR_MAX_STRING_SIZE];
  memset(c, 0, sizeof *c);
  c->bucket = -1;
  if (spec->frames < 1 || spec->frames > MMRT_VDEC_MAX_FRAMES || !(spec->fps >= 0) ||
      (spec->nbuckets == 0 && (spec->h < 1 || spec->w < 1)))
    return mmrt_errf(err, errlen, MMRT_ERR_ARG, "%s: bad frame count, fps or size", name);
  int64_t max_pixels = spec->max_pixels > 0 ? spec->max_pixels : MMRT_VDEC_MAX_PIXELS_DEF;
  av_log_set_level(AV_LOG_QUIET);
  Dec d = {.name = name, .stream = -1};
  int rc = MMRT_OK;
  uint8_t *iobuf = av_malloc(1 << 16);
  AVIOContext *io =
      iobuf ? avio_alloc_context(iobuf, 1 << 16, 0, src, src_read, NULL, src_seek) : NULL;
  d.fmt = io ? avformat_alloc_context() : NULL;
  if (!d.fmt) {
    if (io)
      av_freep(&io->buffer);
    else
      av_free(iobuf);
    avio_context_free(&io);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", name);
  }
  d.fmt->pb = io;
  d.fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
  d.fmt->format_whitelist = av_strdup(FORMATS);
  d.fmt->codec_whitelist = av_strdup(CODECS);
  int r = avformat_open_input(&d.fmt, name, NULL, NULL);
  if (r < 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: not a readable MP4/MOV or WebM/Matroska video (libavformat: %s)", name,
                   averr(r, eb));
    goto out;
  }
  snprintf(c->container, sizeof c->container, "%s", d.fmt->iformat->name);
  /* the decoders find_stream_info runs: no frame above max_pixels either */
  unsigned ns = d.fmt->nb_streams;
  AVDictionary **so = ns ? av_calloc(ns, sizeof *so) : NULL;
  for (unsigned i = 0; so && i < ns; i++) av_dict_set_int(&so[i], "max_pixels", max_pixels, 0);
  r = ns && !so ? AVERROR(ENOMEM) : avformat_find_stream_info(d.fmt, so);
  for (unsigned i = 0; so && i < ns; i++) av_dict_free(&so[i]);
  av_free(so);
  if (r < 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: no stream information (libavformat: %s)",
                   name, averr(r, eb));
    goto out;
  }
  const AVCodec *codec = NULL;
  d.stream = av_find_best_stream(d.fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (d.stream < 0 || !codec) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: %s", name,
                   d.stream == AVERROR_DECODER_NOT_FOUND
                       ? "its video codec is not one of H.264, HEVC, VP8, VP9, AV1, MPEG-4, FFV1"
                       : "no video stream");
    goto out;
  }
  AVStream *st = d.fmt->streams[d.stream];
  snprintf(c->codec, sizeof c->codec, "%s", codec->name);
  if (strstr(CODECS, codec->name) == NULL) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: codec %s is not allowed (expected %s)", name,
                   codec->name, CODECS);
    goto out;
  }
  c->src_w = st->codecpar->width, c->src_h = st->codecpar->height;
  if (c->src_w < 1 || c->src_h < 1 || c->src_w > MMRT_VDEC_MAX_SIDE ||
      c->src_h > MMRT_VDEC_MAX_SIDE || (int64_t)c->src_w * c->src_h > max_pixels) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                   "%s: the video is %dx%d: expected 1 to %d a side, at most %lld pixels", name,
                   c->src_w, c->src_h, MMRT_VDEC_MAX_SIDE, (long long)max_pixels);
    goto out;
  }
  AVRational fr = av_guess_frame_rate(d.fmt, st, NULL);
  c->src_fps = fr.num > 0 && fr.den > 0 ? av_q2d(fr) : 0;
  if (!(c->src_fps > 0 && c->src_fps <= 1000)) {
    rc =
        mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                  "%s: no usable frame rate (%d/%d): expected 0 to 1000 fps", name, fr.num, fr.den);
    goto out;
  }
  if (d.fmt->duration > 0)
    c->duration = (double)d.fmt->duration / AV_TIME_BASE;
  else if (st->duration > 0)
    c->duration = st->duration * av_q2d(st->time_base);
  c->frames = spec->frames;
  if (spec->nbuckets > 0) {
    c->bucket = mmrt_vdec_pick_bucket(c->src_w, c->src_h, spec->buckets, spec->nbuckets);
    c->h = spec->buckets[2 * c->bucket], c->w = spec->buckets[2 * c->bucket + 1];
  } else {
    c->h = spec->h, c->w = spec->w;
  }
  c->index = malloc(sizeof(int) * (size_t)c->frames);
  c->pix = malloc(sizeof(float) * 3 * (size_t)c->frames * c->h * c->w);
  d.small = malloc((size_t)c->h * c->w * 3);
  d.fr = av_frame_alloc();
  d.pkt = av_packet_alloc();
  d.cc = avcodec_alloc_context3(codec);
  if (!c->index || !c->pix || !d.small || !d.fr || !d.pkt || !d.cc) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", name);
    goto out;
  }
  mmrt_vdec_indices(c->frames, c->src_fps, spec->fps, c->index);
  d.cc->thread_count = 1;
  d.cc->max_pixels = max_pixels; /* frames the bitstream makes larger than the container said */
  d.cc->codec_whitelist = av_strdup(CODECS);
  if ((r = avcodec_parameters_to_context(d.cc, st->codecpar)) < 0 ||
      (r = avcodec_open2(d.cc, codec, NULL)) < 0) {
    rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: cannot open the %s decoder: %s", name,
                   codec->name, averr(r, eb));
    goto out;
  }
  /* bounded: stop after the last frame wanted */
  bool eof = false;
  while (rc == MMRT_OK && d.next < c->frames) {
    if (!eof) {
      r = av_read_frame(d.fmt, d.pkt);
      if (r == AVERROR_EOF) {
        eof = true;
        r = avcodec_send_packet(d.cc, NULL);
      } else if (r < 0) {
        rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                       "%s: reading after frame %d: %s (truncated or corrupt?)", name, d.n,
                       averr(r, eb));
        break;
      } else if (d.pkt->stream_index != d.stream) {
        av_packet_unref(d.pkt);
        continue;
      } else {
        r = avcodec_send_packet(d.cc, d.pkt);
        av_packet_unref(d.pkt);
      }
      if (r < 0 && r != AVERROR(EAGAIN) && r != AVERROR_EOF) {
        rc = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: decoding after frame %d: %s", name, d.n,
                       averr(r, eb));
        break;
      }
    }
    int before = d.n;
    rc = drain(&d, c, max_pixels, err, errlen);
    if (rc == MMRT_OK && eof && d.n == before && d.next < c->frames) {
      rc = d.n == 0 ? mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: the video has no frames", name)
                    : mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                                "%s: the video ends after %d frames, but %d frames at %g fps from "
                                "%g fps need source frame %d",
                                name, d.n, c->frames, spec->fps > 0 ? spec->fps : c->src_fps,
                                c->src_fps, c->index[c->frames - 1]);
    }
  }
  c->decoded = d.n;
out:
  avcodec_free_context(&d.cc);
  av_frame_free(&d.fr);
  av_packet_free(&d.pkt);
  sws_freeContext(d.sws);
  free(d.rgb);
  free(d.tmp);
  free(d.small);
  if (d.fmt) avformat_close_input(&d.fmt);
  if (io) av_freep(&io->buffer);
  avio_context_free(&io);
  if (rc != MMRT_OK) mmrt_vdec_free(c);
  return rc;
}

int mmrt_vdec_decode_mem(const char *name, const uint8_t *data, size_t len,
                         const MmrtVdecSpec *spec, MmrtVdecClip *out, char *err, size_t errlen) {
  Src s = {.fd = -1, .data = data ? data : (const uint8_t *)"", .len = (int64_t)len};
  return decode(name, &s, spec, out, err, errlen);
}

int mmrt_vdec_read(const char *path, const MmrtVdecSpec *spec, MmrtVdecClip *out, char *err,
                   size_t errlen) {
  memset(out, 0, sizeof *out);
  int fd;
  int r = mmrt_open_read(path, &fd, err, errlen);
  if (r != MMRT_OK) return r;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    close(fd);
    return mmrt_errf(err, errlen, MMRT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
  }
  if (sb.st_size == 0) {
    close(fd);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: empty file (expected a video)", path);
  }
  Src s = {.fd = fd, .len = sb.st_size};
  r = decode(path, &s, spec, out, err, errlen);
  close(fd);
  return r;
}

void mmrt_vdec_free(MmrtVdecClip *c) {
  free(c->index);
  free(c->pix);
  c->index = NULL;
  c->pix = NULL;
}

/* ---- OpenSoraPlan's JSON ---- */

void mmrt_vdec_json_free(MmrtVdecEntry *e, int n) {
  for (int i = 0; e && i < n; i++) {
    free(e[i].path);
    free(e[i].cap);
    free(e[i].bad);
  }
  free(e);
}

static int field_int(json_object *o, const char *key, int *v) {
  json_object *f;
  if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_int)) return 0;
  int64_t x = json_object_get_int64(f);
  if (x < 1 || x > (1 << 30)) return 0;
  *v = (int)x;
  return 1;
}

/* The entries of the parsed list root (taken: freed here). */
static int entries(const char *json_path, const MmrtVdecSpec *spec, int keep_bad, json_object *root,
                   MmrtVdecEntry **out, int *n, char *err, size_t errlen) {
  int r;
  if (!json_object_is_type(root, json_type_array)) {
    json_object_put(root);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT,
                     "%s: expected a JSON list of {\"path\", \"cap\", \"num_frames\", \"fps\", "
                     "\"resolution\"} objects",
                     json_path);
  }
  size_t len = json_object_array_length(root);
  if (len == 0 || len > (1u << 30)) {
    json_object_put(root);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: the list is empty", json_path);
  }
  MmrtVdecEntry *e = calloc(len, sizeof *e);
  const char *slash = strrchr(json_path, '/');
  int dirlen = slash ? (int)(slash - json_path) : 1;
  const char *dir = slash ? json_path : ".";
  int *idx = malloc(sizeof(int) * (size_t)(spec->frames > 0 ? spec->frames : 1));
  r = e && idx ? MMRT_OK : mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
  for (size_t i = 0; r == MMRT_OK && i < len; i++) {
    json_object *o = json_object_array_get_idx(root, i), *p, *cap, *fps, *res;
    MmrtVdecEntry *x = &e[i];
#define BAD(...)                                                                                   \
  do {                                                                                             \
    char m_[512];                                                                                  \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                                          \
    r = mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: entry %zu: %s", json_path, i, m_);            \
    if (keep_bad && !(x->bad = strdup(err)))                                                       \
      r = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");                                 \
    else if (keep_bad)                                                                             \
      r = MMRT_OK;                                                                                 \
  } while (0)
    if (!json_object_is_type(o, json_type_object)) {
      BAD("expected an object");
      continue;
    }
    if (!json_object_object_get_ex(o, "path", &p) || !json_object_is_type(p, json_type_string) ||
        json_object_get_string_len(p) == 0) {
      BAD("\"path\": expected a non-empty string");
      continue;
    }
    const char *ps = json_object_get_string(p);
    size_t need = strlen(ps) + (size_t)dirlen + 2;
    if (!(x->path = malloc(need))) {
      r = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
      continue;
    }
    if (ps[0] == '/')
      snprintf(x->path, need, "%s", ps);
    else
      snprintf(x->path, need, "%.*s/%s", dirlen, dir, ps);
    struct stat sb;
    if (stat(x->path, &sb) != 0) {
      BAD("\"path\": %s: %s", x->path, strerror(errno));
      continue;
    }
    if (!S_ISREG(sb.st_mode)) {
      BAD("\"path\": %s: not a regular file", x->path);
      continue;
    }
    const char *c0 = NULL;
    if (json_object_object_get_ex(o, "cap", &cap)) {
      if (json_object_is_type(cap, json_type_string))
        c0 = json_object_get_string(cap);
      else if (json_object_is_type(cap, json_type_array) && json_object_array_length(cap) > 0 &&
               json_object_is_type(json_object_array_get_idx(cap, 0), json_type_string))
        c0 = json_object_get_string(json_object_array_get_idx(cap, 0));
    }
    if (!c0) {
      BAD("\"cap\": expected a string or a list of strings");
      continue;
    }
    if (!(x->cap = strdup(c0))) {
      r = mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "out of memory");
      continue;
    }
    if (!field_int(o, "num_frames", &x->num_frames)) {
      BAD("\"num_frames\": expected a whole number from 1");
      continue;
    }
    if (!json_object_object_get_ex(o, "fps", &fps) ||
        !(json_object_is_type(fps, json_type_int) || json_object_is_type(fps, json_type_double)) ||
        !((x->fps = json_object_get_double(fps)) > 0 && x->fps <= 1000)) {
      BAD("\"fps\": expected a number above 0, at most 1000");
      continue;
    }
    if (!json_object_object_get_ex(o, "resolution", &res) ||
        !json_object_is_type(res, json_type_object) || !field_int(res, "height", &x->height) ||
        !field_int(res, "width", &x->width)) {
      BAD("\"resolution\": expected {\"height\": N, \"width\": N}, whole numbers from 1");
      continue;
    }
    if (spec->frames > 0) {
      mmrt_vdec_indices(spec->frames, x->fps, spec->fps, idx);
      if (idx[spec->frames - 1] >= x->num_frames) {
        BAD("\"num_frames\": %d frames at %g fps are too few: %d frames at %g fps need source "
            "frame %d",
            x->num_frames, x->fps, spec->frames, spec->fps > 0 ? spec->fps : x->fps,
            idx[spec->frames - 1]);
        continue;
      }
    }
#undef BAD
  }
  free(idx);
  json_object_put(root);
  if (r != MMRT_OK) {
    mmrt_vdec_json_free(e, (int)len);
    return r;
  }
  *out = e;
  *n = (int)len;
  return MMRT_OK;
}

int mmrt_vdec_json_read(const char *json_path, const MmrtVdecSpec *spec, MmrtVdecEntry **out,
                        int *n, char *err, size_t errlen) {
  return mmrt_vdec_json_read_ex(json_path, spec, 0, out, n, err, errlen);
}

/* JSONL: each non-blank line an object, gathered into one list (NULL with
 * err set: the line that is not JSON). */
static json_object *jsonl_list(const char *path, char *text, size_t got, char *err, size_t errlen) {
  json_object *list = json_object_new_array();
  size_t line = 0;
  for (char *p = text, *end = text + got; list && p < end; line++) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    size_t k = 0;
    while (k < len && strchr(" \t\r", p[k])) k++;
    if (k < len) {
      json_tokener *tok = json_tokener_new_ex(64);
      json_object *o = tok ? json_tokener_parse_ex(tok, p, (int)len) : NULL;
      size_t e = o ? json_tokener_get_parse_end(tok) : 0;
      while (o && e < len && strchr(" \t\r", p[e])) e++;
      if (tok) json_tokener_free(tok);
      if (!o || e < len) {
        json_object_put(o), json_object_put(list);
        mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s:%zu: not JSON (a JSONL line is one object)",
                  path, line + 1);
        return NULL;
      }
      json_object_array_add(list, o);
    }
    p += len + 1;
  }
  if (!list) mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", path);
  return list;
}

int mmrt_vdec_json_read_ex(const char *json_path, const MmrtVdecSpec *spec, int keep_bad,
                           MmrtVdecEntry **out, int *n, char *err, size_t errlen) {
  *out = NULL;
  *n = 0;
  FILE *f;
  int r = mmrt_fopen_read(json_path, &f, err, errlen);
  if (r != MMRT_OK) return r;
  /* the whole file (at most 256 MiB), then one parse: a value, then only
   * white space */
  size_t tcap = 1 << 16, got = 0, lim = (size_t)256 << 20;
  char *text = malloc(tcap);
  while (text) {
    size_t k = fread(text + got, 1, tcap - got, f);
    got += k;
    if (got < tcap || got > lim) break;
    char *t2 = realloc(text, tcap *= 2);
    if (!t2) free(text);
    text = t2;
  }
  fclose(f);
  if (!text) return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", json_path);
  if (got > lim) {
    free(text);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: larger than 256 MiB", json_path);
  }
  size_t plen = strlen(json_path);
  if (plen > 6 && !strcmp(json_path + plen - 6, ".jsonl")) {
    json_object *list = jsonl_list(json_path, text, got, err, errlen);
    free(text);
    if (!list) return MMRT_ERR_FORMAT;
    return entries(json_path, spec, keep_bad, list, out, n, err, errlen);
  }
  json_tokener *tok = json_tokener_new_ex(64);
  if (!tok) {
    free(text);
    return mmrt_errf(err, errlen, MMRT_ERR_NOMEM, "%s: out of memory", json_path);
  }
  json_object *root = json_tokener_parse_ex(tok, text, (int)got);
  enum json_tokener_error je = json_tokener_get_error(tok);
  size_t end = root ? json_tokener_get_parse_end(tok) : 0;
  while (root && end < got && strchr(" \t\r\n", text[end]) && text[end]) end++;
  json_tokener_free(tok);
  free(text);
  if (!root || end < got) {
    json_object_put(root);
    return mmrt_errf(err, errlen, MMRT_ERR_FORMAT, "%s: not JSON (%s)", json_path,
                     root                          ? "more after the list"
                     : je == json_tokener_continue ? "the file ends inside a value"
                                                   : json_tokener_error_desc(je));
  }
  return entries(json_path, spec, keep_bad, root, out, n, err, errlen);
}
