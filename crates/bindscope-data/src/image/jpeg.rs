//! A JPEG decoder that reproduces libjpeg-turbo's default output bit for bit, as Pillow (and so
//! every Hugging Face image processor fed a PIL image) sees it.
//!
//! The `image` crate decodes JPEG with zune-jpeg, whose IDCT (ported from stb_image, 12-bit
//! constants) and YCbCr conversion (14-bit) differ from libjpeg-turbo: on 4:2:0 photographs up to
//! 3 levels on about a quarter of the samples. This decoder follows libjpeg-turbo instead
//! (`jdhuff.c`, `jdphuff.c`, `jidctint.c`, `jdsample.c`, `jdcolor.c`, read for their arithmetic,
//! written anew here):
//! - Huffman sequential (SOF0, SOF1) and progressive (SOF2) scans, 8-bit samples, restart
//!   intervals, interleaved and non-interleaved scans;
//! - `JDCT_ISLOW` integer IDCT (13-bit constants, `PASS1_BITS = 2`), the default of libjpeg and
//!   Pillow, with output saturated to 0..=255 (what libjpeg-turbo's SIMD kernels do);
//! - "fancy" (triangle-filter) chroma upsampling for h2v1, h1v2 and h2v2, edge rows and columns
//!   replicated as libjpeg's context rows do; plain replication for other integral factors;
//! - YCbCr → RGB with libjpeg's 16-bit fixed-point tables; YCCK → CMYK likewise.
//!
//! The colour-space decision follows libjpeg-turbo's `default_decompress_parms` (JFIF marker,
//! Adobe APP14 transform, then component ids). Four-component images come back as CMYK with the
//! Adobe inversion undone, as Pillow's `CMYK;I` raw mode does (Pillow assumes Adobe conventions
//! for every CMYK JPEG).
//!
//! Not supported (clear error): arithmetic coding, lossless and hierarchical JPEG, 12-bit samples,
//! DNL markers, non-integral sampling ratios. Corrupt entropy data is an error here, where
//! libjpeg only warns and Pillow returns the garbled image.

use std::fmt;

/// Why a JPEG could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JpegError {
    /// The file is not a JPEG or is damaged.
    Corrupt(String),
    /// A valid JPEG using a feature this decoder does not implement.
    Unsupported(String),
}

impl fmt::Display for JpegError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JpegError::Corrupt(m) => write!(f, "corrupt JPEG: {m}"),
            JpegError::Unsupported(m) => write!(f, "unsupported JPEG: {m}"),
        }
    }
}

fn corrupt<T>(msg: impl Into<String>) -> Result<T, JpegError> {
    Err(JpegError::Corrupt(msg.into()))
}

fn unsupported<T>(msg: impl Into<String>) -> Result<T, JpegError> {
    Err(JpegError::Unsupported(msg.into()))
}

/// Decoded samples, interleaved, row-major, `width * height * channels` bytes.
#[derive(Debug, Clone)]
pub(crate) enum JpegPixels {
    /// One channel (libjpeg `JCS_GRAYSCALE`, Pillow mode `L`).
    Gray(Vec<u8>),
    /// R, G, B (Pillow mode `RGB`).
    Rgb(Vec<u8>),
    /// C, M, Y, K after undoing the Adobe inversion (Pillow mode `CMYK`).
    Cmyk(Vec<u8>),
}

/// A decoded JPEG.
#[derive(Debug, Clone)]
pub(crate) struct JpegImage {
    pub width: usize,
    pub height: usize,
    pub pixels: JpegPixels,
}

/// Zig-zag index → natural (row-major) index.
const ZIGZAG: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21,
    28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61,
    54, 47, 55, 62, 63,
];

/// A canonical Huffman table (JPEG Annex C) with a 9-bit lookahead.
#[derive(Clone)]
struct Huffman {
    /// `lookup[bits] = (length, value)`; length 0 = code longer than 9 bits.
    lookup: Vec<(u8, u8)>,
    /// `maxcode[l]`: largest code of length `l` (-1 if none), `l = 1..=16`.
    maxcode: [i32; 18],
    /// `valoffset[l]`: index into `values` of the first code of length `l`, minus that code.
    valoffset: [i32; 17],
    values: Vec<u8>,
}

const LOOKAHEAD: u32 = 9;

impl Huffman {
    fn new(counts: &[u8; 16], values: Vec<u8>) -> Result<Self, JpegError> {
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        if total != values.len() || total > 256 {
            return corrupt("bad Huffman table");
        }
        let mut maxcode = [-1i32; 18];
        let mut valoffset = [0i32; 17];
        let mut lookup = vec![(0u8, 0u8); 1 << LOOKAHEAD];
        let mut code: i32 = 0;
        let mut k: usize = 0;
        for l in 1..=16usize {
            let n = counts[l - 1] as usize;
            if n > 0 {
                valoffset[l] = k as i32 - code;
                for _ in 0..n {
                    if l as u32 <= LOOKAHEAD {
                        let shift = LOOKAHEAD - l as u32;
                        let base = (code as usize) << shift;
                        for e in lookup.iter_mut().skip(base).take(1 << shift) {
                            *e = (l as u8, values[k]);
                        }
                    }
                    code += 1;
                    k += 1;
                }
                maxcode[l] = code - 1;
            }
            if code > (1 << l) {
                return corrupt("bad Huffman table (code space overflow)");
            }
            code <<= 1;
        }
        maxcode[17] = i32::MAX; // sentinel: never reached for valid data
        Ok(Self { lookup, maxcode, valoffset, values })
    }
}

/// Entropy-coded data reader: removes byte stuffing and stops at markers.
struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    acc: u64,
    /// Bits in `acc` (real and zero-filled).
    nbits: u32,
    /// Of which zero bits appended after a marker or the end of data.
    fake: u32,
    /// A read needed bits past the end of the entropy-coded segment.
    overrun: bool,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8], pos: usize) -> Self {
        Self { data, pos, acc: 0, nbits: 0, fake: 0, overrun: false }
    }

    fn fill(&mut self) {
        while self.nbits <= 56 {
            let mut byte = 0u8;
            let mut real = false;
            if self.fake == 0 && self.pos < self.data.len() {
                let b = self.data[self.pos];
                if b == 0xFF {
                    if self.data.get(self.pos + 1) == Some(&0x00) {
                        byte = 0xFF;
                        real = true;
                        self.pos += 2;
                    }
                    // else a marker: leave pos on it, feed zeros from now on
                } else {
                    byte = b;
                    real = true;
                    self.pos += 1;
                }
            }
            self.acc |= (byte as u64) << (56 - self.nbits);
            self.nbits += 8;
            if !real {
                self.fake += 8;
            }
        }
    }

    #[inline]
    fn consume(&mut self, n: u32) {
        if n > self.nbits - self.fake {
            self.overrun = true;
        }
        self.acc <<= n;
        self.nbits -= n;
        self.fake = self.fake.min(self.nbits);
    }

    #[inline]
    fn bits(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        if self.nbits < n {
            self.fill();
        }
        let v = (self.acc >> (64 - n)) as u32;
        self.consume(n);
        v
    }

    #[inline]
    fn bit(&mut self) -> bool {
        self.bits(1) == 1
    }

    /// `receive` + `extend` of Annex F: `s` bits as a signed magnitude.
    #[inline]
    fn receive_extend(&mut self, s: u32) -> i32 {
        if s == 0 {
            return 0;
        }
        let v = self.bits(s) as i32;
        if v < (1 << (s - 1)) { v - (1 << s) + 1 } else { v }
    }

    fn decode(&mut self, h: &Huffman) -> Result<u8, JpegError> {
        if self.nbits < 16 {
            self.fill();
        }
        let peek = (self.acc >> (64 - LOOKAHEAD)) as usize;
        let (len, val) = h.lookup[peek];
        if len > 0 {
            self.consume(len as u32);
            return Ok(val);
        }
        let mut code = (self.acc >> (64 - LOOKAHEAD)) as i32;
        let mut l = LOOKAHEAD as usize;
        loop {
            if code <= h.maxcode[l] {
                break;
            }
            l += 1;
            if l > 16 {
                return corrupt("bad Huffman code");
            }
            code = (self.acc >> (64 - l)) as i32;
        }
        self.consume(l as u32);
        let idx = h.valoffset[l] + code;
        match h.values.get(idx as usize) {
            Some(&v) => Ok(v),
            None => corrupt("bad Huffman code"),
        }
    }

    /// Discards buffered bits and returns the position of the next byte after the
    /// entropy-coded data read so far.
    fn byte_pos(&self) -> usize {
        self.pos
    }

    fn reset_at(&mut self, pos: usize) {
        self.pos = pos;
        self.acc = 0;
        self.nbits = 0;
        self.fake = 0;
    }
}

#[derive(Clone, Debug)]
struct Component {
    id: u8,
    h: usize,
    v: usize,
    tq: usize,
    /// Blocks allocated per row / column (padded to whole MCUs).
    bw: usize,
    bh: usize,
    /// Blocks that cover the component's samples (`ceil(dw / 8)`), used by non-interleaved scans.
    width_in_blocks: usize,
    height_in_blocks: usize,
    /// Samples of the component (`ceil(W * h / hmax)`, libjpeg's `downsampled_width`).
    dw: usize,
    dh: usize,
    coefs: Vec<[i16; 64]>,
    dc_pred: i32,
    /// Quantization table latched at the component's first scan (libjpeg `latch_quant_tables`).
    qt: Option<[u16; 64]>,
}

struct Frame {
    progressive: bool,
    width: usize,
    height: usize,
    hmax: usize,
    vmax: usize,
    mcux: usize,
    mcuy: usize,
    comps: Vec<Component>,
}

struct ScanComp {
    ci: usize,
    td: usize,
    ta: usize,
}

#[derive(Default)]
struct State {
    qt: [Option<[u16; 64]>; 4],
    dc: [Option<Huffman>; 4],
    ac: [Option<Huffman>; 4],
    restart: usize,
    jfif: bool,
    adobe: Option<u8>,
    frame: Option<Frame>,
    scans: usize,
}

fn be16(d: &[u8], at: usize) -> Result<usize, JpegError> {
    if at + 2 > d.len() {
        return corrupt("unexpected end of file in a marker segment");
    }
    Ok(((d[at] as usize) << 8) | d[at + 1] as usize)
}

/// Decodes a JPEG file held in memory.
pub(crate) fn decode(data: &[u8]) -> Result<JpegImage, JpegError> {
    if data.len() < 4 || data[0] != 0xFF || data[1] != 0xD8 {
        return corrupt("missing SOI marker (not a JPEG file)");
    }
    let mut st = State::default();
    let mut pos = 2usize;
    loop {
        // Find the next marker, skipping junk and fill bytes as libjpeg's next_marker does.
        while pos < data.len() && data[pos] != 0xFF {
            pos += 1;
        }
        while pos < data.len() && data[pos] == 0xFF {
            pos += 1;
        }
        if pos >= data.len() {
            break;
        }
        let marker = data[pos];
        pos += 1;
        match marker {
            0xD8 => return corrupt("second SOI marker"),
            0xD9 => break,
            0x01 | 0xD0..=0xD7 => continue, // TEM, stray RSTn: no segment
            _ => {}
        }
        let len = be16(data, pos)?;
        if len < 2 || pos + len > data.len() {
            return corrupt(format!("marker 0x{marker:02X} segment runs past the end of the file"));
        }
        let seg = &data[pos + 2..pos + len];
        let seg_end = pos + len;
        match marker {
            0xC0..=0xC2 => read_sof(&mut st, marker, seg)?,
            0xC3 => return unsupported("lossless JPEG (SOF3)"),
            0xC5..=0xC7 => return unsupported("hierarchical JPEG (SOF5-7)"),
            0xC9..=0xCB | 0xCD..=0xCF => return unsupported("arithmetic-coded JPEG"),
            0xCC => return unsupported("arithmetic-coded JPEG (DAC)"),
            0xC4 => read_dht(&mut st, seg)?,
            0xDB => read_dqt(&mut st, seg)?,
            0xDD => {
                if seg.len() < 2 {
                    return corrupt("short DRI segment");
                }
                st.restart = be16(seg, 0)?;
            }
            0xDC => return unsupported("DNL marker"),
            0xE0 if seg.starts_with(b"JFIF\0") => st.jfif = true,
            0xEE if seg.len() >= 12 && seg.starts_with(b"Adobe") => st.adobe = Some(seg[11]),
            0xDA => {
                pos = read_sos_and_scan(&mut st, data, pos, seg)?;
                continue;
            }
            _ => {} // APPn, COM, others: skipped
        }
        pos = seg_end;
    }
    let Some(frame) = st.frame.take() else {
        return corrupt("no frame header (SOF) found");
    };
    if st.scans == 0 {
        return corrupt("no image data (SOS) found");
    }
    // A missing EOI after complete scans is tolerated, as libjpeg does.
    finish(frame, st.jfif, st.adobe)
}

/// Pillow refuses images above twice `Image.MAX_IMAGE_PIXELS` (`DecompressionBombError`).
const MAX_PIXELS: usize = 2 * 89_478_485;

fn read_sof(st: &mut State, marker: u8, seg: &[u8]) -> Result<(), JpegError> {
    if st.frame.is_some() {
        return corrupt("more than one frame header");
    }
    if seg.len() < 6 {
        return corrupt("short SOF segment");
    }
    if seg[0] != 8 {
        return unsupported(format!("{}-bit samples (only 8-bit)", seg[0]));
    }
    let height = be16(seg, 1)?;
    let width = be16(seg, 3)?;
    let nc = seg[5] as usize;
    if width == 0 {
        return corrupt("zero width");
    }
    if height == 0 {
        return unsupported("height 0 (defined by a DNL marker)");
    }
    if width * height > MAX_PIXELS {
        return unsupported(format!("{width}x{height} exceeds {MAX_PIXELS} pixels (Pillow's decompression-bomb limit)"));
    }
    if !(nc == 1 || nc == 3 || nc == 4) {
        return unsupported(format!("{nc} components (only 1, 3 or 4)"));
    }
    if seg.len() < 6 + 3 * nc {
        return corrupt("short SOF segment");
    }
    let mut comps = Vec::with_capacity(nc);
    for i in 0..nc {
        let b = &seg[6 + 3 * i..9 + 3 * i];
        let (h, v, tq) = ((b[1] >> 4) as usize, (b[1] & 15) as usize, b[2] as usize);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) || tq > 3 {
            return corrupt("bad component sampling factors or table index");
        }
        comps.push(Component {
            id: b[0],
            h,
            v,
            tq,
            bw: 0,
            bh: 0,
            width_in_blocks: 0,
            height_in_blocks: 0,
            dw: 0,
            dh: 0,
            coefs: Vec::new(),
            dc_pred: 0,
            qt: None,
        });
    }
    let hmax = comps.iter().map(|c| c.h).max().unwrap();
    let vmax = comps.iter().map(|c| c.v).max().unwrap();
    let mcux = width.div_ceil(8 * hmax);
    let mcuy = height.div_ceil(8 * vmax);
    for c in &mut comps {
        c.dw = (width * c.h).div_ceil(hmax);
        c.dh = (height * c.v).div_ceil(vmax);
        c.width_in_blocks = c.dw.div_ceil(8);
        c.height_in_blocks = c.dh.div_ceil(8);
        c.bw = mcux * c.h;
        c.bh = mcuy * c.v;
        c.coefs = vec![[0i16; 64]; c.bw * c.bh];
    }
    st.frame = Some(Frame { progressive: marker == 0xC2, width, height, hmax, vmax, mcux, mcuy, comps });
    Ok(())
}

fn read_dht(st: &mut State, mut seg: &[u8]) -> Result<(), JpegError> {
    while !seg.is_empty() {
        if seg.len() < 17 {
            return corrupt("short DHT segment");
        }
        let (class, id) = (seg[0] >> 4, (seg[0] & 15) as usize);
        if class > 1 || id > 3 {
            return corrupt("bad Huffman table class or index");
        }
        let mut counts = [0u8; 16];
        counts.copy_from_slice(&seg[1..17]);
        let n: usize = counts.iter().map(|&c| c as usize).sum();
        if seg.len() < 17 + n {
            return corrupt("short DHT segment");
        }
        let table = Huffman::new(&counts, seg[17..17 + n].to_vec())?;
        if class == 0 {
            st.dc[id] = Some(table);
        } else {
            st.ac[id] = Some(table);
        }
        seg = &seg[17 + n..];
    }
    Ok(())
}

fn read_dqt(st: &mut State, mut seg: &[u8]) -> Result<(), JpegError> {
    while !seg.is_empty() {
        let (prec, id) = (seg[0] >> 4, (seg[0] & 15) as usize);
        if prec > 1 || id > 3 {
            return corrupt("bad quantization table precision or index");
        }
        let size = if prec == 0 { 64 } else { 128 };
        if seg.len() < 1 + size {
            return corrupt("short DQT segment");
        }
        let mut q = [0u16; 64];
        for (k, &zz) in ZIGZAG.iter().enumerate() {
            q[zz] = if prec == 0 { seg[1 + k] as u16 } else { ((seg[1 + 2 * k] as u16) << 8) | seg[2 + 2 * k] as u16 };
        }
        st.qt[id] = Some(q);
        seg = &seg[1 + size..];
    }
    Ok(())
}

/// Parses an SOS header and decodes the scan that follows; returns the position after it.
fn read_sos_and_scan(st: &mut State, data: &[u8], pos: usize, seg: &[u8]) -> Result<usize, JpegError> {
    let Some(frame) = st.frame.as_mut() else {
        return corrupt("scan before frame header");
    };
    if seg.is_empty() {
        return corrupt("short SOS segment");
    }
    let ns = seg[0] as usize;
    if ns == 0 || ns > 4 || seg.len() < 1 + 2 * ns + 3 {
        return corrupt("bad SOS segment");
    }
    let mut sc = Vec::with_capacity(ns);
    for i in 0..ns {
        let (id, t) = (seg[1 + 2 * i], seg[2 + 2 * i]);
        let Some(ci) = frame.comps.iter().position(|c| c.id == id) else {
            return corrupt(format!("scan names unknown component {id}"));
        };
        sc.push(ScanComp { ci, td: (t >> 4) as usize, ta: (t & 15) as usize });
    }
    let ss = seg[1 + 2 * ns] as usize;
    let se = seg[2 + 2 * ns] as usize;
    let ah = (seg[3 + 2 * ns] >> 4) as u32;
    let al = (seg[3 + 2 * ns] & 15) as u32;
    if frame.progressive {
        let ok = if ss == 0 { se == 0 } else { ss <= se && se <= 63 && ns == 1 };
        if !ok || al > 13 || ah > 13 {
            return corrupt("bad progressive scan parameters");
        }
    }
    // Sequential scans: Ss / Se / Ah / Al other than 0 / 63 / 0 / 0 only make libjpeg warn; ignored.
    for s in &sc {
        if s.td > 3 || s.ta > 3 {
            return corrupt("bad Huffman table index in scan");
        }
    }
    let data_start = pos + 2 + seg.len();
    let mut br = BitReader::new(data, data_start);
    for c in &mut frame.comps {
        c.dc_pred = 0;
    }
    st.scans += 1;
    for s in &sc {
        let c = &mut frame.comps[s.ci];
        if c.qt.is_none() {
            match st.qt[c.tq] {
                Some(q) => c.qt = Some(q),
                None => return corrupt(format!("quantization table {} is not defined", c.tq)),
            }
        }
    }

    // Collect table references.
    let need_dc = !frame.progressive || (ss == 0 && ah == 0);
    let need_ac = !frame.progressive || ss > 0;
    let mut dcs: Vec<Option<&Huffman>> = Vec::new();
    let mut acs: Vec<Option<&Huffman>> = Vec::new();
    for s in &sc {
        let dc = st.dc[s.td].as_ref();
        let ac = st.ac[s.ta].as_ref();
        if need_dc && dc.is_none() {
            return corrupt("scan uses an undefined DC Huffman table");
        }
        if need_ac && ac.is_none() {
            return corrupt("scan uses an undefined AC Huffman table");
        }
        dcs.push(dc);
        acs.push(ac);
    }

    // MCU geometry.
    let interleaved = ns > 1;
    let (mcus_x, mcus_y) = if interleaved {
        (frame.mcux, frame.mcuy)
    } else {
        let c = &frame.comps[sc[0].ci];
        (c.width_in_blocks, c.height_in_blocks)
    };
    let total = mcus_x * mcus_y;
    let restart = st.restart;
    let mut eobrun = 0u32;
    let progressive = frame.progressive;
    for m in 0..total {
        if restart > 0 && m > 0 && m % restart == 0 {
            // Expect RSTn at a byte boundary.
            if br.overrun {
                return corrupt("entropy-coded data ends early");
            }
            let mut p = br.byte_pos();
            while p < data.len() && data[p] != 0xFF {
                p += 1; // libjpeg would warn about extraneous bytes
            }
            while p < data.len() && data[p] == 0xFF {
                p += 1;
            }
            if p >= data.len() || !(0xD0..=0xD7).contains(&data[p]) {
                return corrupt("missing restart marker");
            }
            br.reset_at(p + 1);
            for c in &mut frame.comps {
                c.dc_pred = 0;
            }
            eobrun = 0;
        }
        let (mx, my) = (m % mcus_x, m / mcus_x);
        for (si, s) in sc.iter().enumerate() {
            let comp = &mut frame.comps[s.ci];
            let (bh, bv) = if interleaved { (comp.h, comp.v) } else { (1, 1) };
            for by in 0..bv {
                for bx in 0..bh {
                    let (x, y) = if interleaved { (mx * comp.h + bx, my * comp.v + by) } else { (mx, my) };
                    let idx = y * comp.bw + x;
                    let mut pred = comp.dc_pred;
                    let block = &mut comp.coefs[idx];
                    if !progressive {
                        *block = [0; 64];
                        decode_block_sequential(&mut br, dcs[si].unwrap(), acs[si].unwrap(), &mut pred, block)?;
                    } else if ss == 0 {
                        if ah == 0 {
                            let t = br.decode(dcs[si].unwrap())? as u32;
                            if t > 16 {
                                return corrupt("bad DC magnitude");
                            }
                            pred = pred.wrapping_add(br.receive_extend(t));
                            block[0] = (pred << al) as i16;
                        } else if br.bit() {
                            block[0] |= (1i32 << al) as i16;
                        }
                    } else if ah == 0 {
                        decode_ac_first(&mut br, acs[si].unwrap(), ss, se, al, &mut eobrun, block)?;
                    } else {
                        decode_ac_refine(&mut br, acs[si].unwrap(), ss, se, al, &mut eobrun, block)?;
                    }
                    comp.dc_pred = pred;
                }
            }
        }
    }
    if br.overrun {
        return corrupt("entropy-coded data ends early (truncated file?)");
    }
    Ok(br.byte_pos())
}

fn decode_block_sequential(
    br: &mut BitReader,
    dc: &Huffman,
    ac: &Huffman,
    pred: &mut i32,
    block: &mut [i16; 64],
) -> Result<(), JpegError> {
    let t = br.decode(dc)? as u32;
    if t > 16 {
        return corrupt("bad DC magnitude");
    }
    *pred = pred.wrapping_add(br.receive_extend(t));
    block[0] = *pred as i16;
    let mut k = 1usize;
    while k < 64 {
        let rs = br.decode(ac)?;
        let (r, s) = ((rs >> 4) as usize, (rs & 15) as u32);
        if s != 0 {
            k += r;
            if k > 63 {
                return corrupt("AC coefficient index past the end of a block");
            }
            block[ZIGZAG[k]] = br.receive_extend(s) as i16;
            k += 1;
        } else {
            if r != 15 {
                break;
            }
            k += 16;
        }
    }
    Ok(())
}

fn decode_ac_first(
    br: &mut BitReader,
    ac: &Huffman,
    ss: usize,
    se: usize,
    al: u32,
    eobrun: &mut u32,
    block: &mut [i16; 64],
) -> Result<(), JpegError> {
    if *eobrun > 0 {
        *eobrun -= 1;
        return Ok(());
    }
    let mut k = ss;
    while k <= se {
        let rs = br.decode(ac)?;
        let (r, s) = ((rs >> 4) as u32, (rs & 15) as u32);
        if s != 0 {
            k += r as usize;
            if k > se {
                return corrupt("AC coefficient index past the end of the band");
            }
            block[ZIGZAG[k]] = (br.receive_extend(s) << al) as i16;
            k += 1;
        } else if r == 15 {
            k += 16;
        } else {
            *eobrun = (1 << r) - 1;
            if r > 0 {
                *eobrun += br.bits(r);
            }
            break;
        }
    }
    Ok(())
}

fn decode_ac_refine(
    br: &mut BitReader,
    ac: &Huffman,
    ss: usize,
    se: usize,
    al: u32,
    eobrun: &mut u32,
    block: &mut [i16; 64],
) -> Result<(), JpegError> {
    let p1: i16 = 1 << al;
    let m1: i16 = (-1i32 << al) as i16;
    let mut k = ss;
    let refine = |br: &mut BitReader, c: &mut i16| {
        if br.bit() && (*c & p1) == 0 {
            *c = if *c >= 0 { c.wrapping_add(p1) } else { c.wrapping_add(m1) };
        }
    };
    if *eobrun == 0 {
        while k <= se {
            let rs = br.decode(ac)?;
            let mut r = (rs >> 4) as i32;
            let s = (rs & 15) as u32;
            let mut newval: i16 = 0;
            if s != 0 {
                // s should be 1 (libjpeg warns otherwise and carries on)
                newval = if br.bit() { p1 } else { m1 };
            } else if r != 15 {
                *eobrun = 1 << r;
                if r > 0 {
                    *eobrun += br.bits(r as u32);
                }
                break;
            }
            // Advance over already-nonzero coefficients (refining them) and r zero ones.
            while k <= se {
                let z = ZIGZAG[k];
                if block[z] != 0 {
                    refine(br, &mut block[z]);
                } else {
                    r -= 1;
                    if r < 0 {
                        break;
                    }
                }
                k += 1;
            }
            if newval != 0 {
                if k > se {
                    return corrupt("AC refinement past the end of the band");
                }
                block[ZIGZAG[k]] = newval;
            }
            k += 1;
        }
    }
    if *eobrun > 0 {
        while k <= se {
            let z = ZIGZAG[k];
            if block[z] != 0 {
                refine(br, &mut block[z]);
            }
            k += 1;
        }
        *eobrun -= 1;
    }
    Ok(())
}

// ---- IDCT (libjpeg jidctint.c, JDCT_ISLOW) ----
// Products and sums are 64-bit as libjpeg's JLONG on LP64; the workspace holds ints.

const CONST_BITS: i64 = 13;
const PASS1_BITS: i64 = 2;
const FIX_0_298631336: i64 = 2446;
const FIX_0_390180644: i64 = 3196;
const FIX_0_541196100: i64 = 4433;
const FIX_0_765366865: i64 = 6270;
const FIX_0_899976223: i64 = 7373;
const FIX_1_175875602: i64 = 9633;
const FIX_1_501321110: i64 = 12299;
const FIX_1_847759065: i64 = 15137;
const FIX_1_961570560: i64 = 16069;
const FIX_2_053119869: i64 = 16819;
const FIX_2_562915447: i64 = 20995;
const FIX_3_072711026: i64 = 25172;

#[inline]
fn descale(x: i64, n: i64) -> i64 {
    (x + (1 << (n - 1))) >> n
}

/// The 8-point butterfly of `jpeg_idct_islow` (even part scaled by `2^CONST_BITS`); returns the
/// outputs 0..8 before descaling.
#[inline]
fn idct_1d(i: [i64; 8]) -> [i64; 8] {
    // Even part.
    let (z2, z3) = (i[2], i[6]);
    let z1 = (z2 + z3) * FIX_0_541196100;
    let tmp2 = z1 - z3 * FIX_1_847759065;
    let tmp3 = z1 + z2 * FIX_0_765366865;
    let tmp0 = (i[0] + i[4]) << CONST_BITS;
    let tmp1 = (i[0] - i[4]) << CONST_BITS;
    let (tmp10, tmp13, tmp11, tmp12) = (tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2);
    // Odd part.
    let (t0, t1, t2, t3) = (i[7], i[5], i[3], i[1]);
    let z1 = -(t0 + t3) * FIX_0_899976223;
    let z2 = -(t1 + t2) * FIX_2_562915447;
    let z5 = (t0 + t2 + t1 + t3) * FIX_1_175875602;
    let z3 = -(t0 + t2) * FIX_1_961570560 + z5;
    let z4 = -(t1 + t3) * FIX_0_390180644 + z5;
    let t0 = t0 * FIX_0_298631336 + z1 + z3;
    let t1 = t1 * FIX_2_053119869 + z2 + z4;
    let t2 = t2 * FIX_3_072711026 + z2 + z3;
    let t3 = t3 * FIX_1_501321110 + z1 + z4;
    [tmp10 + t3, tmp11 + t2, tmp12 + t1, tmp13 + t0, tmp13 - t0, tmp12 - t1, tmp11 - t2, tmp10 - t3]
}

/// Dequantizes and inverse-transforms one block into `out` (8 rows of `stride`).
fn idct_islow(coef: &[i16; 64], q: &[u16; 64], out: &mut [u8], stride: usize) {
    let mut ws = [0i32; 64];
    // Pass 1: columns, results scaled up by 2^PASS1_BITS.
    for c in 0..8 {
        let col: [i64; 8] = std::array::from_fn(|r| coef[r * 8 + c] as i64 * q[r * 8 + c] as i64);
        if col[1..].iter().all(|&v| v == 0) {
            let dc = (col[0] << PASS1_BITS) as i32;
            for r in 0..8 {
                ws[r * 8 + c] = dc;
            }
            continue;
        }
        let o = idct_1d(col);
        for r in 0..8 {
            ws[r * 8 + c] = descale(o[r], CONST_BITS - PASS1_BITS) as i32;
        }
    }
    // Pass 2: rows, descale by 8 and undo PASS1_BITS, saturate to 0..=255 around 128.
    for r in 0..8 {
        let row: [i64; 8] = std::array::from_fn(|c| ws[r * 8 + c] as i64);
        let dst = &mut out[r * stride..r * stride + 8];
        if row[1..].iter().all(|&v| v == 0) {
            dst.fill(clamp_sample(descale(row[0], PASS1_BITS + 3)));
            continue;
        }
        let o = idct_1d(row);
        for c in 0..8 {
            dst[c] = clamp_sample(descale(o[c], CONST_BITS + PASS1_BITS + 3));
        }
    }
}

#[inline]
fn clamp_sample(v: i64) -> u8 {
    (v + 128).clamp(0, 255) as u8
}

// ---- upsampling (libjpeg-turbo jdsample.c) ----

/// Component plane at full resolution (`width x height`) from its decoded samples.
fn upsample(c: &Component, plane: &[u8], stride: usize, frame: &Frame) -> Result<Vec<u8>, JpegError> {
    let (w, h) = (frame.width, frame.height);
    if !frame.hmax.is_multiple_of(c.h) || !frame.vmax.is_multiple_of(c.v) {
        return unsupported("fractional chroma sampling ratio");
    }
    let (hx, vy) = (frame.hmax / c.h, frame.vmax / c.v);
    let (dw, dh) = (c.dw, c.dh);
    let row = |y: usize| -> &[u8] {
        let y = y.min(dh - 1);
        &plane[y * stride..y * stride + dw]
    };
    // Output rows are produced at width hx * dw, then cropped to w.
    let mut out = vec![0u8; w * h];
    let mut line = vec![0u8; dw * hx];
    for oy in 0..h {
        let iy = oy / vy;
        match (hx, vy) {
            (1, 1) => line.copy_from_slice(row(iy)),
            (2, 1) if dw > 2 => h2v1_fancy(row(iy), &mut line),
            (1, 2) => {
                let (near, far, bias) = if oy % 2 == 0 {
                    (row(iy), row(iy.saturating_sub(1)), 1)
                } else {
                    (row(iy), row(iy + 1), 2)
                };
                for x in 0..dw {
                    line[x] = ((near[x] as u32 * 3 + far[x] as u32 + bias) >> 2) as u8;
                }
            }
            (2, 2) if dw > 2 => {
                let (near, far) = if oy % 2 == 0 { (row(iy), row(iy.saturating_sub(1))) } else { (row(iy), row(iy + 1)) };
                h2v2_fancy(near, far, &mut line);
            }
            _ => {
                let src = row(iy);
                for x in 0..dw * hx {
                    line[x] = src[x / hx];
                }
            }
        }
        out[oy * w..(oy + 1) * w].copy_from_slice(&line[..w]);
    }
    Ok(out)
}

fn h2v1_fancy(inp: &[u8], out: &mut [u8]) {
    let n = inp.len();
    out[0] = inp[0];
    out[1] = ((inp[0] as u32 * 3 + inp[1] as u32 + 2) >> 2) as u8;
    for i in 1..n - 1 {
        let v = inp[i] as u32 * 3;
        out[2 * i] = ((v + inp[i - 1] as u32 + 1) >> 2) as u8;
        out[2 * i + 1] = ((v + inp[i + 1] as u32 + 2) >> 2) as u8;
    }
    out[2 * n - 2] = ((inp[n - 1] as u32 * 3 + inp[n - 2] as u32 + 1) >> 2) as u8;
    out[2 * n - 1] = inp[n - 1];
}

fn h2v2_fancy(near: &[u8], far: &[u8], out: &mut [u8]) {
    let n = near.len();
    let col = |i: usize| near[i] as i32 * 3 + far[i] as i32;
    let mut this = col(0);
    let mut next = col(1);
    out[0] = ((this * 4 + 8) >> 4) as u8;
    out[1] = ((this * 3 + next + 7) >> 4) as u8;
    let mut last = this;
    this = next;
    for i in 1..n - 1 {
        next = col(i + 1);
        out[2 * i] = ((this * 3 + last + 8) >> 4) as u8;
        out[2 * i + 1] = ((this * 3 + next + 7) >> 4) as u8;
        last = this;
        this = next;
    }
    out[2 * n - 2] = ((this * 3 + last + 8) >> 4) as u8;
    out[2 * n - 1] = ((this * 4 + 7) >> 4) as u8;
}

// ---- colour conversion (libjpeg jdcolor.c) ----

struct YccTables {
    cr_r: [i32; 256],
    cb_b: [i32; 256],
    cr_g: [i32; 256],
    cb_g: [i32; 256],
}

const SCALEBITS: i32 = 16;

fn fix(x: f64) -> i32 {
    (x * (1i64 << SCALEBITS) as f64 + 0.5) as i32
}

impl YccTables {
    fn new() -> Self {
        let half = 1i32 << (SCALEBITS - 1);
        let mut t = YccTables { cr_r: [0; 256], cb_b: [0; 256], cr_g: [0; 256], cb_g: [0; 256] };
        for i in 0..256 {
            let x = i as i32 - 128;
            t.cr_r[i] = (fix(1.40200) * x + half) >> SCALEBITS;
            t.cb_b[i] = (fix(1.77200) * x + half) >> SCALEBITS;
            t.cr_g[i] = -fix(0.71414) * x;
            t.cb_g[i] = -fix(0.34414) * x + half;
        }
        t
    }

    #[inline]
    fn rgb(&self, y: u8, cb: u8, cr: u8) -> [u8; 3] {
        let y = y as i32;
        let (cb, cr) = (cb as usize, cr as usize);
        [
            (y + self.cr_r[cr]).clamp(0, 255) as u8,
            (y + ((self.cb_g[cb] + self.cr_g[cr]) >> SCALEBITS)).clamp(0, 255) as u8,
            (y + self.cb_b[cb]).clamp(0, 255) as u8,
        ]
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ColorSpace {
    Gray,
    YCbCr,
    Rgb,
    Cmyk,
    Ycck,
}

fn color_space(frame: &Frame, jfif: bool, adobe: Option<u8>) -> ColorSpace {
    match frame.comps.len() {
        1 => ColorSpace::Gray,
        3 => {
            if jfif {
                ColorSpace::YCbCr
            } else if let Some(t) = adobe {
                if t == 0 { ColorSpace::Rgb } else { ColorSpace::YCbCr }
            } else {
                let ids: Vec<u8> = frame.comps.iter().map(|c| c.id).collect();
                if ids == [b'R', b'G', b'B'] { ColorSpace::Rgb } else { ColorSpace::YCbCr }
            }
        }
        _ => match adobe {
            Some(0) | None => ColorSpace::Cmyk,
            Some(_) => ColorSpace::Ycck,
        },
    }
}

fn finish(frame: Frame, jfif: bool, adobe: Option<u8>) -> Result<JpegImage, JpegError> {
    let cs = color_space(&frame, jfif, adobe);
    let mut planes = Vec::with_capacity(frame.comps.len());
    for c in &frame.comps {
        let stride = c.bw * 8;
        let mut plane = vec![0u8; stride * c.bh * 8];
        // A component that never appeared in a scan has no table: libjpeg outputs flat grey.
        let q = c.qt.unwrap_or([0; 64]);
        for by in 0..c.height_in_blocks.min(c.bh) {
            for bx in 0..c.width_in_blocks.min(c.bw) {
                let off = by * 8 * stride + bx * 8;
                idct_islow(&c.coefs[by * c.bw + bx], &q, &mut plane[off..], stride);
            }
        }
        planes.push(upsample(c, &plane, stride, &frame)?);
    }
    let n = frame.width * frame.height;
    let pixels = match cs {
        ColorSpace::Gray => JpegPixels::Gray(planes.swap_remove(0)),
        ColorSpace::Rgb => {
            let mut out = Vec::with_capacity(n * 3);
            for ((&r, &g), &b) in planes[0].iter().zip(&planes[1]).zip(&planes[2]) {
                out.extend_from_slice(&[r, g, b]);
            }
            JpegPixels::Rgb(out)
        }
        ColorSpace::YCbCr => {
            let t = YccTables::new();
            let mut out = Vec::with_capacity(n * 3);
            for ((&y, &cb), &cr) in planes[0].iter().zip(&planes[1]).zip(&planes[2]) {
                out.extend_from_slice(&t.rgb(y, cb, cr));
            }
            JpegPixels::Rgb(out)
        }
        ColorSpace::Cmyk | ColorSpace::Ycck => {
            let t = YccTables::new();
            let mut out = Vec::with_capacity(n * 4);
            let quads = planes[0].iter().zip(&planes[1]).zip(&planes[2]).zip(&planes[3]);
            for (((&a, &b), &c), &k) in quads {
                // Stored (Adobe-inverted) CMYK, then undo the inversion as Pillow's CMYK;I does.
                let stored = if cs == ColorSpace::Ycck {
                    let [r, g, b] = t.rgb(a, b, c);
                    [255 - r, 255 - g, 255 - b, k]
                } else {
                    [a, b, c, k]
                };
                out.extend(stored.iter().map(|v| 255 - v));
            }
            JpegPixels::Cmyk(out)
        }
    };
    Ok(JpegImage { width: frame.width, height: frame.height, pixels })
}
