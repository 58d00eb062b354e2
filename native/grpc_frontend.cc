// The native gRPC front end: HTTP/2 and protobuf work on C++ threads, the engine on Python's.
//
// One grpc::AsyncGenericService takes every RPC of the port on a few completion-queue threads
// (no GIL). Each call's request message is read there; a ModelInfer request is parsed there too
// (inference::ModelInferRequest, generated at build time from tritonclient's descriptors). Calls
// then wait in one queue; the first one in an empty queue writes an eventfd, which the engine's
// asyncio loop watches: one wake-up and one GIL acquisition take every call that arrived
// meanwhile (Frontend.take). Python answers each with finish_bytes / finish_infer / finish_error;
// the answer's protobuf bytes are written here (finish_infer: the response header through the
// generated class, then each output buffer as a raw_output_contents record, the bytes protobuf
// writes for the full message). Cancelled calls (client gone, deadline) are reported to Python
// through the same queue. On a streaming method (the names Python passes) every request message,
// the end of the requests and each written response are events of the same queue; Python writes
// one response at a time (stream_write) and ends the call with finish_error (OK included).
#include <grpcpp/grpcpp.h>
#include <grpcpp/generic/async_generic_service.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "grpc_service.pb.h"

namespace py = pybind11;

namespace {

const char kModelInfer[] = "/inference.GRPCInferenceService/ModelInfer";
// the request parameter perf_analyzer sends on every call (codec.py's EMPTY_FINAL_RESPONSE)
const char kEmptyFinalResponse[] = "triton_enable_empty_final_response";

struct Call;

// A completion-queue tag: which step of which call completed.
struct Tag {
  Call* call;
  int step;  // kStarted, kRead, kFinished, kDone, kWritten
};
enum { kStarted, kRead, kFinished, kDone, kWritten };

struct Call {
  explicit Call(uint64_t call_id) : id(call_id), stream(&ctx) {}
  uint64_t id;
  grpc::GenericServerContext ctx;
  grpc::GenericServerAsyncReaderWriter stream;
  grpc::ByteBuffer in;
  std::string payload;
  std::shared_ptr<inference::ModelInferRequest> infer;  // parsed here: a ModelInfer request
  Tag started{this, kStarted}, read{this, kRead}, finished{this, kFinished}, done{this, kDone},
      written{this, kWritten};
  std::atomic<int> refs{2};  // the op chain and the done notification (+1 per read or write in flight)
  bool streaming = false;   // a streaming method: every message is read and handed on
  bool compressing = false;  // a streaming call's responses are compressed (set at the first)
  std::atomic<bool> answered{false};
};

// One event for Python: a call to serve (kind 0), a cancelled one (1); on a streaming call a
// request message (2), the end of the requests (3), a response written (4).
struct Event {
  int kind;
  Call* call;
  std::string payload;
};

class Frontend;

// A read-only buffer over one raw_input_contents entry of a parsed request (numpy views it).
struct RawInput {
  std::shared_ptr<inference::ModelInferRequest> request;
  const std::string* bytes;
};

class Frontend {
 public:
  Frontend(const std::string& address, const std::vector<std::pair<std::string, int>>& args,
           int max_receive, int max_send, int threads, const std::vector<std::string>& streams)
      : efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), streams_(streams) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    for (const auto& [name, value] : args) builder.AddChannelArgument(name, value);
    builder.SetMaxReceiveMessageSize(max_receive);
    builder.SetMaxSendMessageSize(max_send);
    builder.RegisterAsyncGenericService(&service_);
    for (int i = 0; i < threads; ++i) cqs_.push_back(builder.AddCompletionQueue());
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) throw std::runtime_error("failed to bind " + address);
    for (auto& cq : cqs_) {
      for (int i = 0; i < 8; ++i) Request(cq.get());
      threads_.emplace_back([this, queue = cq.get()] { Run(queue); });
    }
    writer_ = std::thread([this] { WriteLoop(); });
  }

  ~Frontend() { Stop(0.0); close(efd_); }

  int port() const { return port_; }
  int fd() const { return efd_; }

  // Stop accepting, cancel what is still open after grace_s seconds, join the threads.
  void Stop(double grace_s) {
    if (stopped_.exchange(true)) return;
    {
      py::gil_scoped_release release;
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
      {  // the answers queued so far are written; later ones are written by their caller
        std::lock_guard<std::mutex> lock(write_mu_);
        writer_stopped_ = true;
      }
      write_cv_.notify_one();
      if (writer_.joinable()) writer_.join();
      for (auto& cq : cqs_) cq->Shutdown();
      for (auto& thread : threads_) thread.join();
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& event : events_) Unref(event.call);  // never handed to Python: dropped
    events_.clear();
    open_.clear();  // calls still with Python: grpc cancelled them; their memory is leaked
  }

  // Every call that arrived since the last take: (id, method, payload | None, infer | None)
  // for calls, (id, None, None, None) for cancelled ones.
  py::list Take() {
    std::vector<Event> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      uint64_t count;
      ssize_t unused = read(efd_, &count, sizeof count);
      (void)unused;
      events.swap(events_);
      for (auto& event : events)
        if (event.kind == 0) open_[event.call->id] = event.call;
    }
    py::list out(events.size());
    size_t i = 0;
    for (auto& event : events) {
      Call* call = event.call;
      if (event.kind == 1) {
        out[i++] = py::make_tuple(call->id, py::none(), py::none(), py::none());
        Unref(call);
        continue;
      }
      if (event.kind >= 2) {  // (id, "", message | None, kind)
        py::object message = event.kind == 2 ? py::object(py::bytes(event.payload)) : py::none();
        out[i++] = py::make_tuple(call->id, "", message, event.kind);
        Unref(call);
        continue;
      }
      if (call->streaming) {
        out[i++] = py::make_tuple(call->id, std::string(call->ctx.method()), py::none(), py::none());
        Unref(call);  // the event's reference; the op chain's keeps the call
        continue;
      }
      const std::string method(call->ctx.method());
      if (call->infer) {
        out[i++] = py::make_tuple(call->id, method, py::none(), Decoded(call->infer));
      } else {
        out[i++] = py::make_tuple(call->id, method, py::bytes(call->payload), py::none());
        std::string().swap(call->payload);
      }
    }
    return out;
  }

  // The payload of a call taken with a parsed ModelInfer (Python's path for what it must check).
  py::object Payload(uint64_t id) {
    Call* call = Find(id, false);
    if (call == nullptr) return py::none();
    return py::bytes(call->payload);
  }

  void FinishBytes(uint64_t id, const py::bytes& data, bool compress) {
    Call* call = Find(id, true);
    if (call == nullptr) return;
    char* buffer;
    ssize_t length;
    PYBIND11_BYTES_AS_STRING_AND_SIZE(data.ptr(), &buffer, &length);
    grpc::Slice slice(buffer, static_cast<size_t>(length));
    Write(call, grpc::ByteBuffer(&slice, 1), compress);
  }

  // outputs: (name, datatype, shape, buffer) each; the buffer is any object with the buffer
  // protocol (a numpy array, bytes), or b"" for an output in shared memory.
  void FinishInfer(uint64_t id, const std::string& model, const std::string& version,
                   const std::string& request_id, const py::list& outputs, bool compress) {
    Call* call = Find(id, true);
    if (call == nullptr) return;
    inference::ModelInferResponse header;
    header.set_model_name(model);
    header.set_model_version(version);
    header.set_id(request_id);
    std::vector<py::buffer_info> buffers;
    buffers.reserve(outputs.size());
    for (const auto& item : outputs) {
      auto output = item.cast<py::tuple>();
      auto* tensor = header.add_outputs();
      tensor->set_name(output[0].cast<std::string>());
      tensor->set_datatype(output[1].cast<std::string>());
      for (const auto& dim : output[2].cast<py::tuple>()) tensor->add_shape(dim.cast<int64_t>());
      buffers.push_back(output[3].cast<py::buffer>().request());
    }
    size_t size = header.ByteSizeLong();
    for (const auto& info : buffers) {
      size_t n = static_cast<size_t>(info.size * info.itemsize);
      size += 1 + VarintSize(n) + n;
    }
    grpc::Slice slice(size);
    auto* out = const_cast<uint8_t*>(slice.begin());
    header.SerializeWithCachedSizesToArray(out);
    out += header.GetCachedSize();
    for (const auto& info : buffers) {
      size_t n = static_cast<size_t>(info.size * info.itemsize);
      *out++ = (6 << 3) | 2;  // raw_output_contents, length-delimited
      out = WriteVarint(out, n);
      if (n) std::memcpy(out, info.ptr, n);
      out += n;
    }
    Write(call, grpc::ByteBuffer(&slice, 1), compress);
  }

  // One response message on a streaming call; Python writes the next once this one's kind-4
  // event came (one write in flight, as grpc allows).
  void StreamWrite(uint64_t id, const py::bytes& data, bool compress) {
    Call* call = Find(id, false);
    if (call == nullptr) return;
    char* buffer;
    ssize_t length;
    PYBIND11_BYTES_AS_STRING_AND_SIZE(data.ptr(), &buffer, &length);
    grpc::Slice slice(buffer, static_cast<size_t>(length));
    if (compress && !call->compressing) {  // before the initial metadata goes, once
      call->compressing = true;
      call->ctx.set_compression_algorithm(GRPC_COMPRESS_GZIP);
    }
    call->refs.fetch_add(1);
    call->stream.Write(grpc::ByteBuffer(&slice, 1), &call->written);
  }

  void FinishError(uint64_t id, int code, const std::string& message) {
    Call* call = Find(id, true);
    if (call == nullptr) return;
    call->stream.Finish(grpc::Status(static_cast<grpc::StatusCode>(code), message),
                        &call->finished);
  }

  // The metadata of a taken call: [(key, value)], values as text where they are.
  py::list Metadata(uint64_t id) {
    py::list out;
    Call* call = Find(id, false);
    if (call == nullptr) return out;
    for (const auto& [key, value] : call->ctx.client_metadata())
      out.append(py::make_tuple(std::string(key.data(), key.size()),
                                std::string(value.data(), value.size())));
    return out;
  }

  std::string Peer(uint64_t id) {
    Call* call = Find(id, false);
    return call == nullptr ? std::string() : call->ctx.peer();
  }

 private:
  static size_t VarintSize(size_t value) {
    size_t n = 1;
    while (value >= 0x80) { value >>= 7; ++n; }
    return n;
  }
  static uint8_t* WriteVarint(uint8_t* out, size_t value) {
    while (value >= 0x80) { *out++ = static_cast<uint8_t>(value | 0x80); value >>= 7; }
    *out++ = static_cast<uint8_t>(value);
    return out;
  }

  static py::tuple Decoded(const std::shared_ptr<inference::ModelInferRequest>& request) {
    py::list inputs(request->inputs_size());
    for (int i = 0; i < request->inputs_size(); ++i) {
      const auto& tensor = request->inputs(i);
      py::tuple shape(tensor.shape_size());
      for (int d = 0; d < tensor.shape_size(); ++d) shape[d] = py::int_(tensor.shape(d));
      inputs[i] = py::make_tuple(tensor.name(), tensor.datatype(), shape,
                                 RawInput{request, &request->raw_input_contents(i)});
    }
    py::object outputs = py::none();
    if (request->outputs_size()) {
      py::list names(request->outputs_size());
      for (int i = 0; i < request->outputs_size(); ++i) names[i] = request->outputs(i).name();
      outputs = names;
    }
    return py::make_tuple(request->model_name(), request->model_version(), request->id(), inputs,
                          outputs);
  }

  // Whether the parsed request is one Python decodes from the tuple alone: every input raw,
  // no parameters anywhere (but perf_analyzer's triton_enable_empty_final_response, which it
  // sends on every call and a unary ModelInfer ignores: codec.py's _request_parameters), no
  // typed contents. Anything else goes to Python as bytes.
  static bool Plain(const inference::ModelInferRequest& request) {
    if (request.raw_input_contents_size() != request.inputs_size()) return false;
    if (request.parameters_size() &&
        (request.parameters_size() != 1 || !request.parameters().count(kEmptyFinalResponse)))
      return false;
    for (const auto& tensor : request.inputs())
      if (tensor.parameters_size() || tensor.has_contents()) return false;
    for (const auto& output : request.outputs())
      if (output.parameters_size()) return false;
    return true;
  }

  // grpc-core's decompression is off (as on the Python front end): a compressed message goes
  // to Python as it came, which inflates it up to --grpc-max-decompressed-size. The sniff is
  // workbench/frontends/grpc/decompression.py's looks_compressed.
  static bool LooksCompressed(const std::string& data) {
    if (data.size() < 2) return false;
    unsigned first = static_cast<unsigned char>(data[0]), flg = static_cast<unsigned char>(data[1]);
    if ((first & 0x0F) != 8) return first == 0x1F && flg == 0x8B;
    return (first >> 4) <= 7 && ((first << 8) | flg) % 31 == 0 && !(flg & 0x20);
  }

  Call* Find(uint64_t id, bool take) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(id);
    if (it == open_.end()) return nullptr;
    Call* call = it->second;
    if (take) {
      if (call->answered.exchange(true)) return nullptr;
      open_.erase(it);
    }
    return call;
  }

  // A unary call's answer goes to the writer thread: grpc-core runs the HTTP/2 framing and the
  // socket write inside WriteAndFinish on the calling thread, which for finish_bytes /
  // finish_infer is the engine's loop thread holding the GIL. The first answer into an empty
  // queue wakes the writer, which writes every answer queued meanwhile.
  void Write(Call* call, grpc::ByteBuffer buffer, bool compress) {
    bool queued = false, wake = false;
    {
      std::lock_guard<std::mutex> lock(write_mu_);
      if (!writer_stopped_) {
        wake = writes_.empty();
        writes_.push_back({call, std::move(buffer), compress});
        queued = true;
      }
    }
    if (!queued) {
      WriteNow(call, std::move(buffer), compress);
    } else if (wake) {
      write_cv_.notify_one();
    }
  }

  void WriteLoop() {
    std::vector<Answer> batch;
    std::unique_lock<std::mutex> lock(write_mu_);
    while (true) {
      write_cv_.wait(lock, [this] { return writer_stopped_ || !writes_.empty(); });
      if (writes_.empty()) return;  // stopped and drained
      batch.swap(writes_);
      lock.unlock();
      for (auto& answer : batch) WriteNow(answer.call, std::move(answer.buffer), answer.compress);
      batch.clear();
      lock.lock();
    }
  }

  void WriteNow(Call* call, grpc::ByteBuffer buffer, bool compress) {
    grpc::WriteOptions options;
    if (compress) call->ctx.set_compression_algorithm(GRPC_COMPRESS_GZIP);
    call->stream.WriteAndFinish(buffer, options, grpc::Status::OK, &call->finished);
  }

  void Request(grpc::ServerCompletionQueue* cq) {
    Call* call = new Call(next_id_.fetch_add(1));
    call->ctx.AsyncNotifyWhenDone(&call->done);
    service_.RequestCall(&call->ctx, &call->stream, cq, cq, &call->started);
  }

  void Push(Call* call, int kind, std::string payload = std::string()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) { Unref(call); return; }
    bool wake = events_.empty();
    events_.push_back({kind, call, std::move(payload)});
    if (wake) {
      uint64_t one = 1;
      ssize_t unused = write(efd_, &one, sizeof one);
      (void)unused;
    }
  }

  static std::string Flatten(grpc::ByteBuffer& buffer) {
    std::string out;
    grpc::Slice slice;
    if (buffer.TrySingleSlice(&slice).ok()) {
      out.assign(reinterpret_cast<const char*>(slice.begin()), slice.size());
      return out;
    }
    std::vector<grpc::Slice> slices;
    buffer.Dump(&slices);
    size_t total = 0;
    for (auto& s : slices) total += s.size();
    out.reserve(total);
    for (auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return out;
  }

  static void Unref(Call* call) {
    if (call->refs.fetch_sub(1) == 1) delete call;
  }

  void Run(grpc::ServerCompletionQueue* cq) {
    void* raw;
    bool ok;
    while (cq->Next(&raw, &ok)) {
      Tag* tag = static_cast<Tag*>(raw);
      Call* call = tag->call;
      switch (tag->step) {
        case kStarted:
          if (!ok) { break; }  // shutting down: the call never started (leaked at exit)
          if (!stopped_) Request(cq);
          for (const auto& name : streams_)
            if (call->ctx.method() == name) call->streaming = true;
          if (call->streaming) {
            call->refs.fetch_add(1);  // held until Python took the event
            Push(call, 0);
          }
          call->refs.fetch_add(1);  // the read in flight
          call->stream.Read(&call->in, &call->read);
          break;
        case kWritten:
          Push(call, 4);  // takes over the write's reference
          break;
        case kRead: {
          if (call->streaming) {
            if (!ok) {
              Push(call, 3);  // takes over the read's reference
              break;
            }
            call->refs.fetch_add(1);  // the message event's reference
            Push(call, 2, Flatten(call->in));
            call->in.Clear();
            call->stream.Read(&call->in, &call->read);  // the read's reference goes on
            break;
          }
          Unref(call);  // the read's reference (the op chain's keeps it)
          if (!ok) {  // the client sent no message (half-closed at once or cancelled)
            call->answered = true;
            call->stream.Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request message"),
                                &call->finished);
            break;
          }
          call->payload = Flatten(call->in);
          call->in.Clear();
          if (call->ctx.method() == kModelInfer && !LooksCompressed(call->payload)) {
            auto request = std::make_shared<inference::ModelInferRequest>();
            if (request->ParseFromString(call->payload) && Plain(*request)) {
              call->infer = std::move(request);
            }
          }
          Push(call, 0);
          break;
        }
        case kFinished:
          Unref(call);
          break;
        case kDone:
          if (call->ctx.IsCancelled() && !call->answered && !stopped_) {
            call->refs.fetch_add(1);  // held until Python took the cancel event
            Push(call, 1);
          }
          Unref(call);
          break;
      }
    }
  }

  struct Answer {
    Call* call;
    grpc::ByteBuffer buffer;
    bool compress;
  };

  int port_ = 0;
  int efd_;
  grpc::AsyncGenericService service_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::vector<Event> events_;
  std::unordered_map<uint64_t, Call*> open_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> stopped_{false};
  std::vector<std::string> streams_;
  std::thread writer_;
  std::mutex write_mu_;
  std::condition_variable write_cv_;
  std::vector<Answer> writes_;
  bool writer_stopped_ = false;
};

}  // namespace

PYBIND11_MODULE(_native_grpc, m) {
  m.doc() = "The native gRPC front end (native/grpc_frontend.cc)";
  py::class_<RawInput>(m, "RawInput", py::buffer_protocol())
      .def_buffer([](RawInput& raw) {
        return py::buffer_info(const_cast<char*>(raw.bytes->data()), 1,
                               py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(raw.bytes->size())}, {1}, true);
      });
  py::class_<Frontend>(m, "Frontend")
      .def(py::init<const std::string&, const std::vector<std::pair<std::string, int>>&, int, int,
                    int, const std::vector<std::string>&>(),
           py::arg("address"), py::arg("args"), py::arg("max_receive"), py::arg("max_send"),
           py::arg("threads"), py::arg("streams"))
      .def_property_readonly("port", &Frontend::port)
      .def_property_readonly("fd", &Frontend::fd)
      .def("take", &Frontend::Take)
      .def("payload", &Frontend::Payload)
      .def("metadata", &Frontend::Metadata)
      .def("peer", &Frontend::Peer)
      .def("finish_bytes", &Frontend::FinishBytes)
      .def("finish_infer", &Frontend::FinishInfer)
      .def("finish_error", &Frontend::FinishError)
      .def("stream_write", &Frontend::StreamWrite)
      .def("stop", &Frontend::Stop);
}
