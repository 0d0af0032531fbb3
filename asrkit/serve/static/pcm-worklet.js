// AudioWorklet processor: hands the microphone's samples (float32, mono, at the context's
// rate) to the page in blocks of about 100 ms, which sends them over the WebSocket.
class PcmSender extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = Math.round(sampleRate / 10);
    this.buffer = new Float32Array(this.block);
    this.used = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (input && input.length) {
      const channel = input[0];
      let i = 0;
      while (i < channel.length) {
        const n = Math.min(channel.length - i, this.block - this.used);
        this.buffer.set(channel.subarray(i, i + n), this.used);
        this.used += n;
        i += n;
        if (this.used === this.block) {
          this.port.postMessage(this.buffer.slice(0));
          this.used = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("pcm-sender", PcmSender);
