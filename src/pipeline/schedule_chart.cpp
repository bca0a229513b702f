// Text and PNG Gantt charts of a simulated schedule. The PNG is drawn into an RGB buffer with a
// 3x5 bitmap font and handed to libpng, whose errors come back through setjmp.
#include "src/pipeline/schedule_chart.hpp"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "base/check.hpp"

namespace mpitron::pipeline {

namespace {

// Time columns per block before the text chart wraps, and the width that needs no wrapping.
constexpr long long kBlockColumns = 150;
constexpr long long kUnwrappedColumns = 160;

// Duration of the first `op` in the timeline: the unit of the x axis is the forward time.
double first_duration(const SimulationResult& result, Op op, double fallback) {
  for (const auto& rank : result.timeline)
    for (const TimedAction& t : rank)
      if (t.action.op == op) return t.end - t.start;
  return fallback;
}

std::string number(double value, int precision) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", precision, value);
  return text;
}

std::string shortest(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// One character for a micro-batch when its number does not fit in its box.
char micro_batch_char(int mb) {
  static constexpr char kChars[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return mb >= 0 && mb < static_cast<int>(sizeof kChars) - 1 ? kChars[mb] : '#';
}

std::string summary(const ScheduleSpec& spec, const SimulationResult& result, double forward_time,
                    double backward_time) {
  std::string s = std::string("schedule ") + schedule_name(spec.kind) + ": pp " +
                  std::to_string(spec.pp) + ", micro-batches " +
                  std::to_string(spec.micro_batches) + ", virtual stages " +
                  std::to_string(spec.virtual_stages) + "; forward " + shortest(forward_time) +
                  ", backward " + shortest(backward_time) + " per chunk\n";
  if (!result.ok) return s + "simulation failed: " + result.error + "\n";
  // In a stage's forward times (a rank's layers over one micro-batch: V chunks' forwards), the
  // same unit for every schedule, so makespans compare.
  const double stage_forward = forward_time * std::max(spec.virtual_stages, 1);
  s += "makespan " + shortest(result.makespan) + " (" + shortest(result.makespan / stage_forward) +
       " stage forward times), busy " + shortest(result.busy) + " of " +
       shortest(result.makespan * spec.pp) + "\n";
  s += "bubble: simulated " + number(result.bubble, 6) + ", theoretical " +
       number(theoretical_bubble(spec), 6) + "\n";
  s += "peak activations in flight per rank:";
  for (std::size_t r = 0; r < result.peak_in_flight.size(); ++r) {
    s += ' ';
    s += std::to_string(result.peak_in_flight[r]);
    if (spec.virtual_stages > 1) {
      std::string per_chunk;
      for (int c : result.peak_in_flight_per_chunk[r])
        per_chunk += (per_chunk.empty() ? "" : ", ") + std::to_string(c);
      s += " (" + per_chunk + ")";
    }
  }
  if (spec.virtual_stages > 1) s += "; in brackets each chunk's own peak";
  return s + "\n";
}

// --- PNG -----------------------------------------------------------------------------------------

struct Rgb {
  std::uint8_t r, g, b;
};

// 3x5 glyphs, one row of 3 bits per entry, most significant bit on the left.
constexpr std::uint8_t kDigitGlyphs[10][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 2, 2, 2}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}};
// A-Z, then the punctuation the labels use.
constexpr std::uint8_t kLetterGlyphs[26][5] = {
    {2, 5, 7, 5, 5}, {6, 5, 6, 5, 6}, {3, 4, 4, 4, 3}, {6, 5, 5, 5, 6}, {7, 4, 6, 4, 7},
    {7, 4, 6, 4, 4}, {3, 4, 5, 5, 3}, {5, 5, 7, 5, 5}, {7, 2, 2, 2, 7}, {1, 1, 1, 5, 2},
    {5, 5, 6, 5, 5}, {4, 4, 4, 4, 7}, {5, 7, 7, 5, 5}, {6, 5, 5, 5, 5}, {2, 5, 5, 5, 2},
    {6, 5, 6, 4, 4}, {2, 5, 5, 6, 3}, {6, 5, 6, 5, 5}, {3, 4, 2, 1, 6}, {7, 2, 2, 2, 2},
    {5, 5, 5, 5, 7}, {5, 5, 5, 5, 2}, {5, 5, 7, 7, 5}, {5, 5, 2, 5, 5}, {5, 5, 2, 2, 2},
    {7, 1, 2, 4, 7}};
struct PunctuationGlyph {
  char ch;
  std::uint8_t rows[5];
};
constexpr PunctuationGlyph kPunctuation[] = {
    {' ', {0, 0, 0, 0, 0}}, {'.', {0, 0, 0, 0, 2}}, {',', {0, 0, 0, 2, 4}},
    {':', {0, 2, 0, 2, 0}}, {'-', {0, 0, 7, 0, 0}}, {'(', {1, 2, 2, 2, 1}},
    {')', {4, 2, 2, 2, 4}}, {'/', {1, 1, 2, 4, 4}}, {'=', {0, 7, 0, 7, 0}},
    {'%', {5, 1, 2, 4, 5}}, {'+', {0, 2, 7, 2, 0}}, {'\'', {2, 2, 0, 0, 0}}};

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kIdle{236, 236, 236};
constexpr Rgb kInk{40, 40, 40};
constexpr Rgb kForward{31, 119, 180};
constexpr Rgb kBackward{230, 110, 10};

struct Canvas {
  int width, height;
  std::vector<std::uint8_t> pixels;  // RGB rows

  Canvas(int w, int h) : width(w), height(h), pixels(static_cast<std::size_t>(w) * h * 3, 255) {}

  void fill(int x0, int y0, int x1, int y1, Rgb c) {
    x0 = std::max(x0, 0), y0 = std::max(y0, 0);
    x1 = std::min(x1, width), y1 = std::min(y1, height);
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        std::uint8_t* p = &pixels[(static_cast<std::size_t>(y) * width + x) * 3];
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
      }
  }

  void glyph(const std::uint8_t (&rows)[5], int x, int y, int scale, Rgb c) {
    for (int gy = 0; gy < 5; ++gy)
      for (int gx = 0; gx < 3; ++gx)
        if (rows[gy] & (4 >> gx))
          fill(x + gx * scale, y + gy * scale, x + (gx + 1) * scale, y + (gy + 1) * scale, c);
  }

  // Digits, letters (drawn as capitals) and kPunctuation, one pixel column (times scale) apart;
  // other characters as a blank.
  void text(const std::string& s, int x, int y, int scale, Rgb c) {
    for (char ch : s) {
      if (ch >= '0' && ch <= '9') {
        glyph(kDigitGlyphs[ch - '0'], x, y, scale, c);
      } else if (std::isalpha(static_cast<unsigned char>(ch))) {
        glyph(kLetterGlyphs[std::toupper(static_cast<unsigned char>(ch)) - 'A'], x, y, scale, c);
      } else {
        for (const PunctuationGlyph& p : kPunctuation)
          if (p.ch == ch) glyph(p.rows, x, y, scale, c);
      }
      x += 4 * scale;
    }
  }
};

int text_width(const std::string& text, int scale) {
  return (4 * static_cast<int>(text.size()) - 1) * scale;
}

Rgb mix_with_white(Rgb c, double t) {
  auto mix = [t](std::uint8_t v) {
    return static_cast<std::uint8_t>(std::lround(v + (255 - v) * t));
  };
  return {mix(c.r), mix(c.g), mix(c.b)};
}

// Chunk 0 in the full colour, later chunks up to 55% lighter.
Rgb box_colour(Op op, int chunk, int virtual_stages) {
  const double t = virtual_stages > 1 ? 0.55 * chunk / (virtual_stages - 1) : 0.0;
  return mix_with_white(op == Op::forward ? kForward : kBackward, t);
}

Rgb text_colour_on(Rgb c) {
  const double luminance = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
  return luminance > 150 ? kInk : kWhite;
}

struct PngFailure {
  char message[256];
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* failure = static_cast<PngFailure*>(png_get_error_ptr(png));
  std::snprintf(failure->message, sizeof failure->message, "%s", message);
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

// libpng longjmps out of its calls on error: nothing with a destructor lives in this frame.
bool write_png_rows(std::FILE* file, int width, int height, png_bytep* rows, PngFailure* failure) {
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, failure, on_png_error, on_png_warning);
  if (png == nullptr) {
    std::snprintf(failure->message, sizeof failure->message, "libpng could not start");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(failure->message, sizeof failure->message, "libpng could not start");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_init_io(png, file);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

std::string schedule_timeline_text(const ScheduleSpec& spec, const SimulationResult& result,
                                   int columns_per_unit) {
  const double forward_time = first_duration(result, Op::forward, 1.0);
  const double backward_time = first_duration(result, Op::backward, 2.0 * forward_time);
  if (!result.ok) return summary(spec, result, forward_time, backward_time);
  const int cpu = std::max(columns_per_unit, 1);
  const double scale = cpu / (forward_time > 0 ? forward_time : 1.0);  // columns per time
  const long long width = std::max<long long>(std::llround(result.makespan * scale), 1);
  const int V = spec.virtual_stages;
  const bool training =
      std::any_of(result.timeline.begin(), result.timeline.end(), [](const auto& rank) {
        return std::any_of(rank.begin(), rank.end(),
                           [](auto& t) { return t.action.op == Op::backward; });
      });
  const int kinds = training ? 2 : 1;

  // Rows per rank: forward of each chunk, then backward of each chunk.
  std::vector<std::string> labels, rows;
  for (std::size_t r = 0; r < result.timeline.size(); ++r) {
    std::vector<std::string> cells(kinds * V, std::string(width, ' '));
    std::vector<bool> busy(width, false);
    for (const TimedAction& t : result.timeline[r]) {
      if (t.action.op != Op::forward && t.action.op != Op::backward) continue;
      const long long c0 = std::min(std::llround(t.start * scale), width - 1);
      const long long c1 = std::min(std::max(std::llround(t.end * scale), c0 + 1), width);
      std::string& row = cells[(t.action.op == Op::backward ? V : 0) + t.action.chunk];
      const std::string mb = std::to_string(t.action.micro_batch);
      const std::string head = static_cast<long long>(mb.size()) <= c1 - c0
                                   ? mb
                                   : std::string(1, micro_batch_char(t.action.micro_batch));
      for (long long c = c0; c < c1; ++c) {
        row[c] = c - c0 < static_cast<long long>(head.size()) ? head[c - c0] : '-';
        busy[c] = true;
      }
    }
    for (long long c = 0; c < width; ++c)
      if (!busy[c])
        for (auto& row : cells) row[c] = '.';
    for (int k = 0; k < kinds * V; ++k) {
      std::string label = k == 0 ? "rank " + std::to_string(r) : "";
      std::string kind = k < V ? "F" : "B";
      if (V > 1) kind += std::to_string(k % V);
      labels.push_back(label + " " + kind);
      rows.push_back(cells[k]);
    }
  }
  std::size_t label_width = 0;
  for (const auto& l : labels) label_width = std::max(label_width, l.size());

  // Ruler: '|' every 10 forward times with the time above it, '+' every 5.
  std::string ticks(width, '-'), times(width + 8, ' ');
  for (long long c = 0; c < width; ++c) {
    if (c % (10LL * cpu) == 0) {
      ticks[c] = '|';
      const std::string t = std::to_string(c / cpu);
      times.replace(c, t.size(), t);
    } else if (c % (5LL * cpu) == 0) {
      ticks[c] = '+';
    }
  }

  std::string out =
      std::string("F forward, B backward") + (V > 1 ? " (then the chunk)" : "") +
      "; each box starts with its micro-batch (0-9, a-z, A-Z where the number does "
      "not fit), '-' continues it, '.' idle; 1 column = " +
      (cpu == 1 ? std::string("1 forward time") : "1/" + std::to_string(cpu) + " forward time") +
      "\n";
  const long long block =
      width <= kUnwrappedColumns ? width : std::max(kBlockColumns / (10LL * cpu), 1LL) * 10LL * cpu;
  const std::string pad(label_width + 2, ' ');
  for (long long begin = 0; begin < width; begin += block) {
    const long long n = std::min(block, width - begin);
    if (begin > 0) out += "\n";
    out += pad + times.substr(begin, n) + "\n";
    out += pad + ticks.substr(begin, n) + "\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::string label = labels[i];
      label.insert(0, label_width - label.size(), ' ');
      out += label + " |" + rows[i].substr(begin, n) + "|\n";
    }
  }
  return out + summary(spec, result, forward_time, backward_time);
}

void write_schedule_png(const std::string& path, const ScheduleSpec& spec,
                        const SimulationResult& result) {
  if (!result.ok)
    throw std::invalid_argument("no chart of a failed schedule simulation: " + result.error);
  const int pp = static_cast<int>(result.timeline.size());
  const int V = std::max(spec.virtual_stages, 1);
  // The x axis counts a stage's forward times (V chunks' forwards), as the summary does.
  const double forward_time = first_duration(result, Op::forward, 1.0) * V;
  const double units = forward_time > 0 ? result.makespan / forward_time : result.makespan;

  constexpr int kMargin = 12, kRowHeight = 28, kRowGap = 6, kAxisHeight = 30, kLegendHeight = 24;
  constexpr int kTitleHeight = 34, kAxisLabelHeight = 22;
  constexpr int kLabelScale = 2, kTargetChartWidth = 1400;
  const int unit_px =
      std::clamp(static_cast<int>(std::lround(kTargetChartWidth / std::max(units, 1.0))), 4, 48);
  const int label_width = std::max(text_width(std::to_string(std::max(pp - 1, 0)), kLabelScale),
                                   text_width("RANK", kLabelScale)) +
                          2 * kMargin;
  const int chart_x = label_width;
  const std::string title = std::string(schedule_name(spec.kind)) + "  PP " +
                            std::to_string(spec.pp) + "  MICRO-BATCHES " +
                            std::to_string(spec.micro_batches) +
                            (V > 1 ? "  VIRTUAL STAGES " + std::to_string(V) : std::string()) +
                            "  BUBBLE " + number(result.bubble, 3) + " (THEORY " +
                            number(theoretical_bubble(spec), 3) + ")  MAKESPAN " + shortest(units);
  const int chart_width = static_cast<int>(std::ceil(units * unit_px));
  const std::string x_label =
      "TIME, IN A STAGE'S FORWARD TIMES (ONE MICRO-BATCH THROUGH A RANK'S LAYERS)";
  const std::string legend_note =
      V > 1 ? "LIGHTER: LATER CHUNKS. IN A BOX: ITS MICRO-BATCH" : "IN A BOX: ITS MICRO-BATCH";
  const int legend_width = 2 * V * 16 + text_width("FORWARD", 2) + text_width("BACKWARD", 2) +
                           2 * 26 + text_width(legend_note, 2);
  const int canvas_width = std::max({chart_x + chart_width, kMargin + text_width(title, 2),
                                     chart_x + text_width(x_label, 2), chart_x + legend_width}) +
                           kMargin;
  const int rows_height = pp * (kRowHeight + kRowGap);
  const int top = kMargin + kTitleHeight;
  Canvas canvas(canvas_width,
                top + rows_height + kAxisHeight + kAxisLabelHeight + kLegendHeight + kMargin);
  canvas.text(title, kMargin, kMargin, 2, kInk);
  canvas.text("RANK", kMargin, top - 14, kLabelScale, kInk);
  auto x_of = [&](double time) {
    return chart_x + static_cast<int>(std::lround(time / forward_time * unit_px));
  };

  for (int r = 0; r < pp; ++r) {
    const int y0 = top + r * (kRowHeight + kRowGap), y1 = y0 + kRowHeight;
    const std::string label = std::to_string(r);
    canvas.text(label, kMargin, y0 + (kRowHeight - 5 * kLabelScale) / 2, kLabelScale, kInk);
    canvas.fill(chart_x, y0, chart_x + chart_width, y1, kIdle);
    for (const TimedAction& t : result.timeline[r]) {
      if (t.action.op != Op::forward && t.action.op != Op::backward) continue;
      const int x0 = x_of(t.start), x1 = std::max(x_of(t.end), x0 + 1);
      const Rgb colour = box_colour(t.action.op, t.action.chunk, V);
      canvas.fill(x1 - x0 >= 3 ? x0 + 1 : x0, y0, x1, y1, colour);  // 1 px gap between boxes
      const std::string mb = std::to_string(t.action.micro_batch);
      for (int scale : {2, 1}) {
        const int w = text_width(mb, scale);
        if (w + 4 > x1 - x0 - 1) continue;
        canvas.text(mb, x0 + 1 + (x1 - x0 - 1 - w) / 2, y0 + (kRowHeight - 5 * scale) / 2, scale,
                    text_colour_on(colour));
        break;
      }
    }
  }

  // Time axis in forward times: a tick each unit (where there is room), numbers every `step`.
  const int axis_y = top + rows_height;
  canvas.fill(chart_x, axis_y, chart_x + chart_width + 1, axis_y + 1, kInk);
  int step = 1;
  for (int s : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}) {
    step = s;
    if (s * unit_px >= 40) break;
  }
  for (int u = 0; u <= static_cast<int>(std::floor(units)); ++u) {
    const int x = chart_x + u * unit_px;
    if (u % step == 0) {
      canvas.fill(x, axis_y, x + 1, axis_y + 7, kInk);
      const std::string t = std::to_string(u);
      canvas.text(t, x - text_width(t, 2) / 2, axis_y + 10, 2, kInk);
    } else if (unit_px >= 6 || u % 5 == 0) {
      canvas.fill(x, axis_y, x + 1, axis_y + 3, kInk);
    }
  }

  canvas.text(x_label, chart_x, axis_y + kAxisHeight, 2, kInk);

  // Legend: forward and its chunk shades, then backward and its shades; numbers in the boxes
  // are micro-batches.
  int x = chart_x;
  const int legend_y = axis_y + kAxisHeight + kAxisLabelHeight;
  for (Op op : {Op::forward, Op::backward}) {
    for (int c = 0; c < V; ++c) {
      canvas.fill(x, legend_y, x + 14, legend_y + 14, box_colour(op, c, V));
      x += 16;
    }
    const std::string name = op == Op::forward ? "FORWARD" : "BACKWARD";
    canvas.text(name, x + 2, legend_y + 2, 2, kInk);
    x += text_width(name, 2) + 24;
  }
  canvas.text(legend_note, x, legend_y + 2, 2, kInk);

  std::vector<png_bytep> rows(canvas.height);
  for (int y = 0; y < canvas.height; ++y)
    rows[y] = &canvas.pixels[static_cast<std::size_t>(y) * canvas.width * 3];
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr)
    throw UsageError("cannot write the schedule chart " + path + ": " + std::strerror(errno));
  PngFailure failure{};
  const bool written = write_png_rows(file, canvas.width, canvas.height, rows.data(), &failure);
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(path.c_str());
    throw UsageError("cannot write the schedule chart " + path + ": " +
                     (written ? std::string("closing the file failed") : failure.message));
  }
}

}  // namespace mpitron::pipeline
